//! The leader's links to its followers, and one message to all of them.

use std::collections::HashSet;

use crate::message::Msg;
use crate::protocol::{send, Writer};

/// The leader's link to one follower.
pub(super) struct Follower {
    pub(super) node_rank: u32,
    pub(super) host: String,
    /// Its agent's pid on its node (to end it there when a spare replaces it).
    pub(super) pid: u32,
    /// The link to it (its heartbeats go from a task of their own).
    pub(super) writer: Writer,
    pub(super) alive: bool,
}

/// The node ranks of the followers still there.
pub(super) fn live(followers: &[Follower]) -> HashSet<u32> {
    followers
        .iter()
        .filter(|f| f.alive)
        .map(|f| f.node_rank)
        .collect()
}

/// Send `msg` to every live follower; one that cannot be written to counts as lost.
pub(super) async fn broadcast(followers: &mut [Follower], msg: &Msg) {
    for f in followers.iter_mut().filter(|f| f.alive) {
        if send(&f.writer, msg).await.is_err() {
            f.alive = false;
        }
    }
}
