//! What a value must be to go into a batch script: one `#SBATCH` line's worth of safe
//! characters, a job name that is also a folder name, a partition or GPU type, an extra
//! sbatch option. Resolution and rendering check the same rules.

use crate::plan::MAX_JOB_NAME;
use crate::values::ValueError;

/// Refuse what would break or change an `#SBATCH` line: whitespace, quotes, `#` (starts a
/// comment there), backslash, control characters; and empty values.
pub(crate) fn sbatch_safe(s: &str, what: &str) -> Result<(), ValueError> {
    if s.is_empty() {
        return Err(ValueError {
            message: format!("the {what} is empty"),
        });
    }
    if let Some(c) = s
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || matches!(c, '"' | '\'' | '#' | '\\'))
    {
        return Err(ValueError {
            message: format!(
                "the {what} `{}` contains {}, which an #SBATCH line cannot carry",
                s.escape_debug(),
                describe_char(c)
            ),
        });
    }
    Ok(())
}

fn describe_char(c: char) -> String {
    match c {
        ' ' => "a space".to_owned(),
        '\n' => "a newline".to_owned(),
        '#' => "`#` (it starts a comment in an #SBATCH line)".to_owned(),
        c if c.is_control() || c.is_whitespace() => format!("the character U+{:04X}", c as u32),
        c => format!("`{c}`"),
    }
}

/// A partition or GPU type: letters, digits, `_`, `.`, `-` (and `,` between partitions).
pub(crate) fn simple_name(s: &str, what: &str, list: bool) -> Result<String, ValueError> {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    let parts: Vec<&str> = if list {
        s.split(',').collect()
    } else {
        vec![s]
    };
    if parts.iter().all(|p| !p.is_empty() && p.chars().all(ok)) {
        Ok(s.to_owned())
    } else {
        Err(ValueError {
            message: format!(
                "`{}` is not a {what}: use letters, digits, `_`, `.` and `-`{}",
                s.escape_debug(),
                if list {
                    " (several separated by `,`)"
                } else {
                    ""
                }
            ),
        })
    }
}

/// Whether `s` is a usable partition name (`list`: or comma-separated names) or GPU type.
pub(crate) fn simple_name_ok(s: &str, list: bool) -> bool {
    simple_name(s, "name", list).is_ok()
}

/// Whether `s` is a usable job name.
pub(crate) fn job_name_ok(s: &str) -> bool {
    job_name(s).is_ok()
}

/// A job name: it names the SLURM job and the experiment folder.
pub(crate) fn job_name(s: &str) -> Result<String, ValueError> {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '+');
    if !s.is_empty()
        && s.len() <= MAX_JOB_NAME
        && s.chars().all(ok)
        && s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
    {
        Ok(s.to_owned())
    } else {
        Err(ValueError {
            message: format!(
                "`{}` is not a job name: use up to {MAX_JOB_NAME} letters, digits, `_`, `.`, `+` and `-`, starting with a letter or digit (it names the experiment folder)",
                s.escape_debug()
            ),
        })
    }
}

/// What a command is called, for a default job name: the stem of the first word that names
/// a script (`python -u train.py`, `torchrun --nproc-per-node 8 tools/train.py CFG.py`,
/// `bash run.sh`: `train`, `train`, `run`), else the last part of the module after `-m`
/// (`python -m mypkg.pretrain`: `pretrain`), else the program's file name (`/opt/bin/fit`:
/// `fit`). `None` for an empty command.
pub(crate) fn command_stem(command: &[String]) -> Option<String> {
    const SCRIPTS: [&str; 3] = [".py", ".sh", ".bash"];
    let file_name = |w: &str| w.rsplit('/').next().unwrap_or(w).to_owned();
    let script = command.iter().find_map(|w| {
        let name = file_name(w);
        SCRIPTS
            .iter()
            .find_map(|ext| name.strip_suffix(ext).filter(|stem| !stem.is_empty()))
            .map(str::to_owned)
    });
    let module = || {
        let at = command.iter().position(|w| w == "-m")?;
        let module = command.get(at + 1)?;
        module.rsplit('.').next().map(str::to_owned)
    };
    script
        .or_else(module)
        .or_else(|| command.first().map(|p| file_name(p)))
        .filter(|n| !n.is_empty())
}

/// A default job name made from a file or program name.
pub(crate) fn sanitize_job_name(base: &str) -> String {
    let mut name: String = base
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '+') {
                c
            } else {
                '_'
            }
        })
        .take(MAX_JOB_NAME)
        .collect();
    if !name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric())
    {
        name.insert(0, 'j');
        name.truncate(MAX_JOB_NAME);
    }
    name
}

/// An extra sbatch option: an option (starts with `-`) on one line.
pub(crate) fn sbatch_arg(a: &str) -> Result<(), ValueError> {
    if a.contains(['\n', '\r', '\0']) {
        return Err(ValueError {
            message: format!(
                "`{}` contains a line break or NUL: each entry becomes one #SBATCH line",
                a.escape_debug()
            ),
        });
    }
    if !a.starts_with('-') {
        return Err(ValueError {
            message: format!(
                "`{a}` is not an sbatch option: options start with `-` (e.g. \"--account=vision\")"
            ),
        });
    }
    Ok(())
}
