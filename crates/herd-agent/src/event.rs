//! [`Event`]: what an agent's event loop hears about (its workers' exits, its peers'
//! messages and losses, signals).

use nix::sys::signal::Signal;

use crate::message::Msg;

/// What an agent's event loop hears about.
pub(crate) enum Event {
    /// One of this node's workers exited.
    WorkerExited {
        attempt: u32,
        rank: u32,
        status: std::io::Result<std::process::ExitStatus>,
    },
    /// A peer sent a message (`msg`), or was lost (`msg: None`, `why`).
    Peer {
        node_rank: u32,
        msg: Option<Msg>,
        why: String,
    },
    /// One of this node's GPUs raised an error during attempt `attempt` (`crate::gpus`).
    GpuError {
        attempt: u32,
        error: herd_exp::gpus::GpuError,
    },
    /// This agent received a signal of [`signals::HANDLED`](crate::signals::HANDLED).
    Signal(Signal),
}
