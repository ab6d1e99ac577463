//! The wire between agents after the rendezvous handshake: how the messages
//! ([`Msg`]) travel, one JSON object per length-prefixed frame
//! ([`herd_rendezvous::write_frame`], bounded in size); the heartbeats each side sends
//! from a task of its own ([`Writer::beat`]); and the reader that turns a peer's frames,
//! silence or closed connection into agent events, with a verdict on silence that adapts
//! to the link's own heartbeats ([`Detector`]).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use herd_rendezvous::{read_frame, write_frame, RendezvousError};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::{mpsc, Mutex};
use tokio::time::Instant;

use crate::event::Event;
use crate::message::Msg;

/// How often each agent sends a heartbeat on each link (a quarter of the heartbeat
/// timeout when that is shorter).
pub(crate) const HEARTBEAT_EVERY: Duration = Duration::from_millis(500);

/// The sending half of a link: shared by the agent's own code and the link's heartbeat
/// task, each frame written whole under its lock.
#[derive(Clone)]
pub(crate) struct Writer(Arc<Mutex<OwnedWriteHalf>>);

impl Writer {
    pub(crate) fn new(w: OwnedWriteHalf) -> Writer {
        Writer(Arc::new(Mutex::new(w)))
    }

    /// Heartbeats on this link every `every`, from a task of their own: they go out while
    /// the agent's own loop waits on something (a teardown, a preflight, a spawn), so a
    /// peer hears this agent as long as its process runs. The task ends when every clone
    /// of this writer is gone, or when a write fails: then `tx` gets the link's loss, as
    /// [`read_peer`] sends it.
    pub(crate) fn beat(&self, every: Duration, node_rank: u32, tx: mpsc::UnboundedSender<Event>) {
        let link = Arc::downgrade(&self.0);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(w) = link.upgrade() else { return };
                let wrote = write_frame(&mut *w.lock().await, &Msg::Heartbeat).await;
                if let Err(e) = wrote {
                    let _ = tx.send(Event::Peer {
                        node_rank,
                        msg: None,
                        why: format!("cannot write to it ({e})"),
                    });
                    return;
                }
            }
        });
    }
}

/// The heartbeat interval for a link whose verdict comes at the latest after `cap`.
pub(crate) fn heartbeat_every(cap: Duration) -> Duration {
    HEARTBEAT_EVERY.min(cap / 4).max(Duration::from_millis(10))
}

/// Send one message.
pub(crate) async fn send(w: &Writer, msg: &Msg) -> Result<(), RendezvousError> {
    write_frame(&mut *w.0.lock().await, msg).await
}

/// When a silent peer counts as lost: a φ-accrual failure detector (Hayashibara et al.,
/// as Akka and Cassandra use it) over the link's own heartbeat intervals. The verdict
/// comes when the silence is longer than the mean interval, plus [`Detector::PAUSE`], plus
/// [`Detector::Z`] standard deviations (at least [`Detector::MIN_STD`]) of the last
/// [`Detector::WINDOW`] intervals: under a normal model, a chance below 10⁻⁸ (φ = 8) that a
/// live peer's heartbeat is that late. Never before [`Detector::FLOOR`], never after the
/// cap (`--heartbeat-timeout`), and the cap itself until [`Detector::MIN_SAMPLES`]
/// intervals are known. A link whose heartbeats jitter (a loaded node, a busy network)
/// gets a later verdict by itself; a steady one, a verdict in about 2.6 s.
#[derive(Debug, Clone)]
pub(crate) struct Detector {
    intervals: VecDeque<f64>,
    last: Instant,
    cap: Duration,
}

impl Detector {
    /// Intervals kept.
    pub(crate) const WINDOW: usize = 100;
    /// Intervals needed before the verdict adapts.
    pub(crate) const MIN_SAMPLES: usize = 4;
    /// The least standard deviation assumed, seconds.
    pub(crate) const MIN_STD: f64 = 0.1;
    /// A pause any live agent may take on top of its usual interval (a busy node's
    /// scheduler, a collection of stacks), seconds.
    pub(crate) const PAUSE: f64 = 1.5;
    /// Standard deviations: the normal quantile of 1 − 10⁻⁸ (φ = 8).
    pub(crate) const Z: f64 = 5.61;
    /// The earliest verdict.
    pub(crate) const FLOOR: Duration = Duration::from_millis(2500);

    /// A detector whose last word from the peer came at `now`; `cap` is the latest verdict.
    pub(crate) fn new(now: Instant, cap: Duration) -> Detector {
        Detector {
            intervals: VecDeque::with_capacity(Self::WINDOW),
            last: now,
            cap,
        }
    }

    /// A heartbeat arrived at `now`: its interval counts.
    pub(crate) fn heartbeat(&mut self, now: Instant) {
        let gap = now.saturating_duration_since(self.last).as_secs_f64();
        if self.intervals.len() == Self::WINDOW {
            self.intervals.pop_front();
        }
        self.intervals.push_back(gap);
        self.last = now;
    }

    /// Another message arrived at `now`: the peer lives, the intervals stay as they are.
    pub(crate) fn heard(&mut self, now: Instant) {
        self.last = now;
    }

    /// How long a silence is tolerated now.
    pub(crate) fn patience(&self) -> Duration {
        let n = self.intervals.len();
        if n < Self::MIN_SAMPLES {
            return self.cap;
        }
        let mean = self.intervals.iter().sum::<f64>() / n as f64;
        let var = self
            .intervals
            .iter()
            .map(|x| (x - mean).powi(2))
            .sum::<f64>()
            / n as f64;
        let std = var.sqrt().max(Self::MIN_STD);
        let secs = mean + Self::PAUSE + Self::Z * std;
        Duration::from_secs_f64(secs).max(Self::FLOOR).min(self.cap)
    }

    /// When the peer counts as lost if nothing more arrives.
    pub(crate) fn deadline(&self) -> Instant {
        self.last + self.patience()
    }

    /// The link's heartbeats in words, for the verdict: `every 0.50 s ± 0.01 s over 40`.
    pub(crate) fn describe(&self) -> String {
        let n = self.intervals.len();
        if n < Self::MIN_SAMPLES {
            return format!("too few heartbeats yet to adapt ({n})");
        }
        let mean = self.intervals.iter().sum::<f64>() / n as f64;
        let var = self
            .intervals
            .iter()
            .map(|x| (x - mean).powi(2))
            .sum::<f64>()
            / n as f64;
        format!(
            "its heartbeats came every {mean:.2} s ± {:.2} s",
            var.sqrt()
        )
    }
}

/// Read frames from a peer into the event channel; silence past what the link's
/// [`Detector`] tolerates (at the latest `cap`) or a closed connection ends with `msg:
/// None`. With `patient`, silence counts only after the first message (a follower waits
/// quietly while the leader gathers the other nodes).
pub(crate) fn read_peer(
    mut r: OwnedReadHalf,
    node_rank: u32,
    cap: Duration,
    patient: bool,
    tx: mpsc::UnboundedSender<Event>,
) {
    tokio::spawn(async move {
        let mut heard = !patient;
        let mut detector = Detector::new(Instant::now(), cap);
        loop {
            let deadline = if heard {
                detector.deadline()
            } else {
                Instant::now() + Duration::from_secs(86_400 * 365)
            };
            let read = tokio::time::timeout_at(deadline, read_frame::<_, Msg>(&mut r)).await;
            let now = Instant::now();
            if !heard {
                detector = Detector::new(now, cap);
            }
            heard = true;
            let why = match read {
                Ok(Ok(Some(Msg::Heartbeat))) => {
                    detector.heartbeat(now);
                    continue;
                }
                Ok(Ok(Some(msg))) => {
                    detector.heard(now);
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
                Err(_) => format!(
                    "no word from it for {:.1} s ({}; --heartbeat-timeout {} s at the latest)",
                    detector.patience().as_secs_f64(),
                    detector.describe(),
                    cap.as_secs_f64()
                ),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn beats(d: &mut Detector, start: Instant, gaps: &[f64]) -> Instant {
        let mut t = start;
        for g in gaps {
            t += Duration::from_secs_f64(*g);
            d.heartbeat(t);
        }
        t
    }

    #[test]
    fn steady_heartbeats_give_a_verdict_in_seconds_and_jitter_or_few_of_them_a_later_one() {
        let t0 = Instant::now();
        let cap = Duration::from_secs(10);
        let mut d = Detector::new(t0, cap);
        assert_eq!(d.patience(), cap, "no heartbeat yet: the cap");
        beats(&mut d, t0, &[0.5; 3]);
        assert_eq!(d.patience(), cap, "three: still the cap");
        let last = beats(&mut d, t0 + Duration::from_millis(1500), &[0.5; 40]);
        // 0.5 + 1.5 + 5.61 × 0.1 (the least std) = 2.56 s.
        let p = d.patience().as_secs_f64();
        assert!((p - 2.561).abs() < 0.01, "{p}");
        assert_eq!(d.deadline(), last + d.patience());
        // A loaded node: intervals of 0.5 ± 0.4 s.
        let mut j = Detector::new(t0, cap);
        let gaps: Vec<f64> = (0..40)
            .map(|i| if i % 2 == 0 { 0.1 } else { 0.9 })
            .collect();
        beats(&mut j, t0, &gaps);
        let pj = j.patience().as_secs_f64();
        assert!((pj - (0.5 + 1.5 + 5.61 * 0.4)).abs() < 0.01, "{pj}");
        // Wild jitter: never past the cap.
        let mut w = Detector::new(t0, cap);
        beats(&mut w, t0, &[0.1, 5.0, 0.1, 5.0, 0.1, 5.0]);
        assert_eq!(w.patience(), cap);
        // A cap under the floor wins.
        let mut short = Detector::new(t0, Duration::from_secs(1));
        beats(&mut short, t0, &[0.25; 10]);
        assert_eq!(short.patience(), Duration::from_secs(1));
        assert!(
            d.describe()
                .starts_with("its heartbeats came every 0.50 s ± 0.00 s"),
            "{}",
            d.describe()
        );
    }

    #[test]
    fn other_messages_show_life_without_changing_the_intervals() {
        let t0 = Instant::now();
        let mut d = Detector::new(t0, Duration::from_secs(10));
        let last = beats(&mut d, t0, &[0.5; 10]);
        let before = d.patience();
        // A burst of messages right after a heartbeat: the peer lives, the model stays.
        for i in 1..=5 {
            d.heard(last + Duration::from_millis(i));
        }
        assert_eq!(d.patience(), before);
        assert_eq!(d.deadline(), last + Duration::from_millis(5) + before);
    }
}
