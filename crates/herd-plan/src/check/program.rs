//! The checks of the worker's program: that it (and the script an interpreter runs) exists
//! where the job runs, what torchrun mode needs, and for a job in a container, that the
//! image is there (the program is the image's).

use std::fmt;
use std::path::{Path, PathBuf};

use super::finding::{error, warning, Finding};
use crate::keys::Key;
use crate::plan::{Mode, Plan};

/// How to tell whether the command's program (and its script) exist where the job runs.
#[derive(Clone, Copy)]
pub struct ProgramLookup<'a> {
    /// The code snapshot: the job runs from here, so relative paths resolve here.
    pub snapshot: &'a Path,
    /// `PATH` directories searched for a bare program name (the submitting shell's `PATH`;
    /// sbatch passes the environment on by default).
    pub path: &'a [PathBuf],
    /// Whether `path` is a file the job can use (the CLI passes a real file-system test;
    /// tests pass a list).
    pub exists: &'a dyn Fn(&Path) -> bool,
    /// Whether `path` is a file the job can execute (torchrun mode's interpreter).
    pub executable: &'a dyn Fn(&Path) -> bool,
}

impl fmt::Debug for ProgramLookup<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProgramLookup")
            .field("snapshot", &self.snapshot)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// The program checks of `plan` with `lookup`: the image for a job in a container, else
/// the program (and torchrun in torchrun mode).
pub(super) fn check_programs(plan: &Plan, lookup: &ProgramLookup<'_>, out: &mut Vec<Finding>) {
    match &plan.container.image {
        // The program is the image's, not this machine's: the image must be here.
        Some(image) => check_container_image(image, out),
        None => {
            check_program(plan, lookup, out);
            if plan.mode == Mode::Torchrun {
                check_torchrun(plan, lookup, out);
            }
        }
    }
}

/// Interpreters whose first non-option argument is a script the job needs in the snapshot.
fn interpreter(program: &str) -> Option<&'static str> {
    let base = program.rsplit('/').next().unwrap_or(program);
    if base.starts_with("python") {
        Some("python")
    } else if matches!(base, "bash" | "sh" | "zsh" | "dash") {
        Some("sh")
    } else {
        None
    }
}

/// The script an interpreter command runs, with its argument index (1-based).
fn script_argument(kind: &str, args: &[String]) -> Option<(usize, String)> {
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        match (kind, a.as_str()) {
            (_, "--") => return args.get(i + 1).map(|s| (i + 2, s.clone())),
            ("python", "-m" | "-c") | ("sh", "-c") => return None,
            ("python", "-W" | "-X") | ("sh", "-o" | "+o" | "-O" | "+O") => i += 2,
            ("python", s) if s.starts_with("-m") || s.starts_with("-c") => return None,
            (_, s) if s.starts_with('-') || (kind == "sh" && s.starts_with('+')) => i += 1,
            _ => return Some((i + 2, a.clone())),
        }
    }
    None
}

/// A job in a container: its image, when it is a path, must exist where herd is run (a
/// path every node sees, on a shared file system); an image in Podman's store is each
/// node's, looked for by the node's preflight, as is the worker's program inside.
fn check_container_image(image: &str, out: &mut Vec<Finding>) {
    if !herd_container::is_image_name(image) && !Path::new(image).exists() {
        out.push(error(
            "container-not-found",
            &[Key::Container],
            format!(
                "the container image {image} does not exist here: give the path of an image \
                 folder, SquashFS or SIF file that every node sees"
            ),
        ));
    }
}

fn check_program(plan: &Plan, lookup: &ProgramLookup<'_>, out: &mut Vec<Finding>) {
    let Some(program) = plan.command.first() else {
        return;
    };
    let origin = plan.describe(Key::Command);
    let snap = lookup.snapshot.display();
    if program.contains('/') {
        let path = if Path::new(program).is_absolute() {
            PathBuf::from(program)
        } else {
            lookup.snapshot.join(program)
        };
        if !(lookup.exists)(&path) {
            let where_ = if Path::new(program).is_absolute() {
                "does not exist".to_owned()
            } else {
                format!("is not in the snapshot {snap}, where the job runs")
            };
            out.push(error(
                "program-not-found",
                &[Key::Command],
                format!("{origin}: the program `{program}` {where_}"),
            ));
        }
    } else if !lookup
        .path
        .iter()
        .any(|dir| (lookup.exists)(&dir.join(program)))
    {
        out.push(error(
            "program-not-found",
            &[Key::Command],
            format!(
                "{origin}: the program `{program}` is not on PATH ({}); activate its environment before submitting, or give its full path",
                searched(lookup.path)
            ),
        ));
    }
    if let Some(kind) = interpreter(program) {
        if let Some((n, script)) = script_argument(kind, &plan.command[1..]) {
            let path = if Path::new(&script).is_absolute() {
                PathBuf::from(&script)
            } else {
                lookup.snapshot.join(&script)
            };
            if !(lookup.exists)(&path) {
                out.push(error(
                    "script-not-found",
                    &[Key::Command],
                    format!(
                        "{origin}: `{script}` (argument {n}, the script {program} runs) is not in the snapshot {snap}, where the job runs"
                    ),
                ));
            }
        }
    }
}

/// The PATH directories, for a message: the first six.
fn searched(path: &[PathBuf]) -> String {
    if path.is_empty() {
        return "PATH is empty".to_owned();
    }
    let dirs: Vec<String> = path
        .iter()
        .take(6)
        .map(|p| p.display().to_string())
        .collect();
    let more = if path.len() > 6 { ", …" } else { "" };
    format!("searched {}{more}", dirs.join(":"))
}

/// Torchrun mode needs something that starts torchrun on every node ([`crate::torchrun`]).
/// A python command runs `PYTHON -m torch.distributed.run`: the interpreter must exist and
/// be executable (by its path, or the first one on PATH, as the job will find it: sbatch
/// passes this PATH on; the compute nodes are assumed to see the same file system). Whether
/// torch imports there is not tried: that would run the user's python, seconds of imports
/// on a login node, for every check. A python with no `torchrun` beside it (pip installs it
/// next to the interpreter torch is installed for) gets a warning only, since torch may be
/// installed for it elsewhere (the user site). Any other program needs `torchrun` on PATH.
fn check_torchrun(plan: &Plan, lookup: &ProgramLookup<'_>, out: &mut Vec<Finding>) {
    use crate::torchrun::{python_of, MODULE, TORCHRUN};
    let Some(program) = plan.command.first() else {
        return;
    };
    let origin = plan.describe(Key::Command);
    let Some(python) = python_of(&plan.command) else {
        if !lookup
            .path
            .iter()
            .any(|dir| (lookup.exists)(&dir.join(TORCHRUN)))
        {
            out.push(error(
                "torchrun-not-found",
                &[Key::Command, Key::Mode],
                format!(
                    "{origin}: torchrun mode runs `{TORCHRUN}` from PATH to start `{program}`, and `{TORCHRUN}` is not on PATH here ({}): give the venv's python by its path (`-- /path/venv/bin/python train.py`; herd then runs `/path/venv/bin/python -m {MODULE}`, no `{TORCHRUN}` needed), or activate the venv before submitting (sbatch passes PATH on)",
                    searched(lookup.path)
                ),
            ));
        }
        return;
    };
    let found = if python.contains('/') {
        let path = if Path::new(python).is_absolute() {
            PathBuf::from(python)
        } else {
            lookup.snapshot.join(python)
        };
        // A missing one is check_program's finding already.
        (lookup.exists)(&path).then_some(path)
    } else {
        lookup
            .path
            .iter()
            .map(|dir| dir.join(python))
            .find(|p| (lookup.exists)(p))
    };
    let Some(found) = found else {
        return;
    };
    if !(lookup.executable)(&found) {
        out.push(error(
            "torchrun-python-not-executable",
            &[Key::Command],
            format!(
                "{origin}: torchrun mode runs `{} -m {MODULE}`, and {} is not executable: name a python interpreter that is (`ls -l {}`)",
                python,
                found.display(),
                found.display()
            ),
        ));
        return;
    }
    let beside = found.with_file_name(TORCHRUN);
    if !(lookup.exists)(&beside) {
        out.push(warning(
            "torchrun-not-beside-python",
            &[Key::Command],
            format!(
                "{origin}: torchrun mode runs `{python} -m {MODULE}`, and there is no `{TORCHRUN}` beside {} ({} does not exist), as pip puts it where torch is installed: if torch is not installed for this python the job fails on every node; name the python of the environment that has torch",
                found.display(),
                beside.display()
            ),
        ));
    }
}
