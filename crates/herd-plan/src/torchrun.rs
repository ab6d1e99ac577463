//! What starts torchrun in torchrun mode (docs/submit.md, "Launch modes").
//!
//! `torchrun` is a console script that pip installs beside the Python torch is installed
//! for; a job whose command names its venv's python by path (`/path/venv/bin/python
//! train.py`) often has no `torchrun` on PATH. So when the command's program is a Python
//! interpreter, the batch script runs torchrun's module with that very interpreter,
//! `PYTHON -m torch.distributed.run … --no_python PYTHON ARGS…`: the same launcher
//! (`torchrun` is `torch.distributed.run:main`), and `--no_python` still runs the command
//! exactly as given, interpreter options included. Any other program (a shell script, a
//! wrapper) keeps `torchrun` from PATH.

/// torchrun's module, run with the command's interpreter: `PYTHON -m torch.distributed.run`.
pub const MODULE: &str = "torch.distributed.run";

/// The console script run from PATH when the command is no Python interpreter.
pub const TORCHRUN: &str = "torchrun";

/// Whether `program` names a Python interpreter: its file name is `python`, or `python`
/// and a version (`python3`, `python3.11`).
pub fn is_python(program: &str) -> bool {
    let base = program.rsplit('/').next().unwrap_or(program);
    base.strip_prefix("python").is_some_and(|version| {
        !version.starts_with('.')
            && !version.ends_with('.')
            && version.chars().all(|c| c.is_ascii_digit() || c == '.')
    })
}

/// The interpreter that runs torchrun for `command`: its program, when that is a Python
/// interpreter; `None`: `torchrun` from PATH.
pub fn python_of(command: &[String]) -> Option<&str> {
    command.first().map(String::as_str).filter(|p| is_python(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pythons_are_told_by_their_file_name() {
        for p in [
            "python",
            "python3",
            "python3.11",
            "/scratch/venv/bin/python",
            "./env/bin/python3.12",
        ] {
            assert!(is_python(p), "{p}");
        }
        for p in [
            "torchrun",
            "python-config",
            "python3.",
            "python.sh",
            "ipython",
            "/opt/python3/bin/train",
            "bash",
        ] {
            assert!(!is_python(p), "{p}");
        }
        assert_eq!(
            python_of(&["/v/bin/python".into(), "train.py".into()]),
            Some("/v/bin/python")
        );
        assert_eq!(python_of(&["./run.sh".into()]), None);
        assert_eq!(python_of(&[]), None);
    }
}
