//! The leader's links to its followers, and one message to all of them.

use std::collections::HashSet;

use tokio::net::tcp::OwnedWriteHalf;

use crate::message::Msg;
use crate::protocol::send;

/// The leader's link to one follower.
pub(super) struct Follower {
    pub(super) node_rank: u32,
    pub(super) host: String,
    /// Its agent's pid on its node (to end it there when a spare replaces it).
    pub(super) pid: u32,
    pub(super) writer: OwnedWriteHalf,
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
        if send(&mut f.writer, msg).await.is_err() {
            f.alive = false;
        }
    }
}
