//! The signals herd handles, and what each one means: the one place for `herd launch`'s
//! agents and for `herd run`, which passes them on to its local agents (docs/launch.md,
//! "Signals").
//!
//! - SIGUSR1, SIGUSR2 (SLURM's `--signal` warning before a time limit, `scancel --signal`):
//!   [`Action::Forward`], passed on to the workers; the job goes on.
//! - SIGTERM, SIGINT, SIGHUP (`scancel`, Ctrl-C, a closed terminal or ssh session):
//!   [`Action::Terminate`], passed on to the workers, then the job is torn down everywhere
//!   and every agent exits 1. SIGHUP is a request to end the job like SIGTERM, as under
//!   torchrun, whose elastic agent raises the same `SignalException` for SIGTERM, SIGINT,
//!   SIGHUP and SIGQUIT and closes its workers with the signal it got. Unlike torchrun,
//!   herd leaves SIGHUP ignored when it was ignored at start (`nohup herd run …`), so the
//!   job outlives the session as it did before herd handled SIGHUP.
//!
//! - SIGCONT (which SLURM sends before every signal it sends a job, and which herd's batch
//!   script asks for as the job's `--signal`, so that a preemption or a time limit is
//!   announced by a signal no process can die of): [`Action::Notice`], the leader asks the
//!   scheduler what is happening; the workers are not signalled.
//!
//! What a signal means for the job (the user's own, a preemption, the time limit) is the
//! leader's decision, from the scheduler's facts (`herd_slurm::scheduler::lifecycle`).
//!
//! Every other signal keeps its default action.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{mpsc, oneshot};

/// What a handled signal asks of an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Pass it on to the workers; the job goes on.
    Forward,
    /// End the job: pass it on to the workers, tear everything down, exit 1.
    Terminate,
    /// Something may be happening to the job: ask the scheduler; signal no worker.
    Notice,
}

/// Every signal herd handles, in the order they are listed in the docs.
pub const HANDLED: [Signal; 6] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGCONT,
];

/// What `sig` asks of an agent; `None` for a signal herd leaves to its default action.
pub fn action(sig: Signal) -> Option<Action> {
    match sig {
        Signal::SIGTERM | Signal::SIGINT | Signal::SIGHUP => Some(Action::Terminate),
        Signal::SIGUSR1 | Signal::SIGUSR2 => Some(Action::Forward),
        Signal::SIGCONT => Some(Action::Notice),
        _ => None,
    }
}

/// Whether `sig` is in the `SigIgn:` mask of a `/proc/PID/status` text.
fn ignored_in(status: &str, sig: Signal) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| (mask >> (sig as i32 - 1)) & 1 == 1)
}

/// Whether this process ignores `sig` right now (before [`watch`]: since it started).
fn ignored(sig: Signal) -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| ignored_in(&s, sig))
}

/// Install handlers for every signal of [`HANDLED`] (they are in place when this returns;
/// SIGHUP only when it is not ignored, see the module docs) and send `wrap(sig)` into `tx`
/// for each one this process receives, until `tx` closes. Must be called inside a tokio
/// runtime with the signal driver enabled.
pub fn watch<T: Send + 'static>(tx: mpsc::UnboundedSender<T>, wrap: fn(Signal) -> T) {
    for sig in HANDLED {
        if sig == Signal::SIGHUP && ignored(sig) {
            continue;
        }
        let Ok(mut stream) = signal(SignalKind::from_raw(sig as i32)) else {
            continue;
        };
        let tx = tx.clone();
        tokio::spawn(async move {
            while stream.recv().await.is_some() {
                if tx.send(wrap(sig)).is_err() {
                    return;
                }
            }
        });
    }
}

/// Passes every handled signal this process receives on to other processes, from a thread
/// of its own so the caller may block (`herd run` waiting for its local agents, which then
/// act on the signal as [`action`] says).
pub struct Forwarder {
    pids: oneshot::Sender<Vec<i32>>,
}

impl Forwarder {
    /// Install the handlers, before the processes to forward to exist: a signal that comes
    /// while they start is forwarded once they are known, never lost to its default action.
    pub fn install() -> std::io::Result<Forwarder> {
        let (pids_tx, pids_rx) = oneshot::channel::<Vec<i32>>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::spawn(move || {
            runtime.block_on(async move {
                let (tx, mut rx) = mpsc::unbounded_channel();
                watch(tx, |sig| sig);
                let _ = ready_tx.send(());
                let Ok(pids) = pids_rx.await else { return };
                while let Some(sig) = rx.recv().await {
                    for &p in &pids {
                        let _ = kill(Pid::from_raw(p), sig);
                    }
                }
            });
        });
        ready_rx
            .recv()
            .map_err(|_| std::io::Error::other("the signal thread ended before it started"))?;
        Ok(Forwarder { pids: pids_tx })
    }

    /// From now on (and for any signal received since [`Forwarder::install`]), pass every
    /// handled signal on to `pids`.
    pub fn forward_to(self, pids: Vec<i32>) {
        let _ = self.pids.send(pids);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sighup_ends_the_job_like_sigterm() {
        assert_eq!(action(Signal::SIGHUP), action(Signal::SIGTERM));
        assert_eq!(action(Signal::SIGHUP), Some(Action::Terminate));
        assert_eq!(action(Signal::SIGINT), Some(Action::Terminate));
    }

    #[test]
    fn ignored_signals_are_read_from_the_sigign_mask() {
        // SIGHUP (1) and SIGPIPE (13) ignored, as under `nohup` in a Rust program.
        let status = "Name:\therd\nSigBlk:\t0000000000000000\nSigIgn:\t0000000000001001\n";
        assert!(ignored_in(status, Signal::SIGHUP));
        assert!(ignored_in(status, Signal::SIGPIPE));
        assert!(!ignored_in(status, Signal::SIGTERM));
        assert!(!ignored_in("Name:\therd\n", Signal::SIGHUP));
    }

    #[test]
    fn usr_signals_are_forwarded_and_others_left_alone() {
        assert_eq!(action(Signal::SIGUSR1), Some(Action::Forward));
        assert_eq!(action(Signal::SIGUSR2), Some(Action::Forward));
        assert_eq!(action(Signal::SIGCONT), Some(Action::Notice));
        assert_eq!(action(Signal::SIGQUIT), None);
        assert_eq!(action(Signal::SIGCHLD), None);
        for sig in HANDLED {
            assert!(
                action(sig).is_some(),
                "{sig} is handled, so it has an action"
            );
        }
    }
}
