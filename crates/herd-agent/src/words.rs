//! What the agents say on stderr, in a few shared words.

use nix::sys::signal::Signal;

/// The cause in the report when a signal ends the job.
pub(crate) fn cancelled(host: &str, sig: Signal) -> String {
    format!(
        "the agent on {host} received {}: job cancelled",
        sig.as_str()
    )
}

pub(crate) fn say(msg: impl AsRef<str>) {
    eprintln!("herd: {}", msg.as_ref());
}

/// `n` and `noun`, plural unless one: `1 node`, `2 nodes`.
pub(crate) fn count(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}
