//! The wire between agents after the rendezvous handshake: how the messages
//! ([`Msg`]) travel, one JSON object per length-prefixed frame
//! ([`herd_rendezvous::write_frame`], bounded in size), and the reader that turns a peer's
//! frames, silence or closed connection into agent events.

use std::time::Duration;

use herd_rendezvous::{read_frame, write_frame, RendezvousError};
use tokio::io::AsyncWriteExt;
use tokio::net::tcp::OwnedReadHalf;
use tokio::sync::mpsc;

use crate::event::Event;
use crate::message::Msg;

/// Send one message.
pub(crate) async fn send<W: AsyncWriteExt + Unpin>(
    w: &mut W,
    msg: &Msg,
) -> Result<(), RendezvousError> {
    write_frame(w, msg).await
}

/// Read frames from a peer into the event channel; silence past `timeout` or a closed
/// connection ends with `msg: None`. With `patient`, silence counts only after the first
/// message (a follower waits quietly while the leader gathers the other nodes).
pub(crate) fn read_peer(
    mut r: OwnedReadHalf,
    node_rank: u32,
    timeout: Duration,
    patient: bool,
    tx: mpsc::UnboundedSender<Event>,
) {
    tokio::spawn(async move {
        let mut heard = !patient;
        loop {
            let limit = if heard {
                timeout
            } else {
                Duration::from_secs(86_400 * 365)
            };
            let read = tokio::time::timeout(limit, read_frame::<_, Msg>(&mut r)).await;
            heard = true;
            let why = match read {
                Ok(Ok(Some(Msg::Heartbeat))) => continue,
                Ok(Ok(Some(msg))) => {
                    if tx
                        .send(Event::Peer {
                            node_rank,
                            msg: Some(msg),
                            why: String::new(),
                        })
                        .is_err()
                    {
                        return;
                    }
                    continue;
                }
                Ok(Ok(None)) => "its connection closed (agent exited or node died)".to_owned(),
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no word from it for {timeout:?}"),
            };
            let _ = tx.send(Event::Peer {
                node_rank,
                msg: None,
                why,
            });
            return;
        }
    });
}
