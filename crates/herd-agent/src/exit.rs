//! How a worker ended, read from its wait status ([`Exit`] is the failure report's).

use herd_exp::failure::Exit;

/// The [`Exit`] of a wait status: its code, or the name of the signal that killed it.
pub fn exit_of(status: std::process::ExitStatus) -> Exit {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => Exit::Code(code),
        (None, Some(sig)) => Exit::Signal(signal_name(sig)),
        (None, None) => Exit::Code(-1),
    }
}

/// `SIGSEGV` for 11, `signal 99` for unknown numbers.
pub fn signal_name(sig: i32) -> String {
    nix::sys::signal::Signal::try_from(sig)
        .map(|s| s.as_str().to_owned())
        .unwrap_or_else(|_| format!("signal {sig}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_signals() {
        assert_eq!(signal_name(11), "SIGSEGV");
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_name(99), "signal 99");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            exit_of(std::process::ExitStatus::from_raw(11)),
            Exit::Signal("SIGSEGV".into())
        );
        assert_eq!(
            exit_of(std::process::ExitStatus::from_raw(3 << 8)),
            Exit::Code(3)
        );
    }
}
