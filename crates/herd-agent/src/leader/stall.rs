//! Restarts that make no progress stop early: an attempt that fails again where the last
//! one failed (a bad batch, a corrupt checkpoint, a broken node, a bug at start) would
//! burn every restart of `--max-restarts` for nothing. After [`NO_PROGRESS_RESTARTS`]
//! restarts in a row that made no progress ([`progressed`]) the leader restarts no more
//! and says why (docs/launch.md, "Restarts that make no progress"); `Lead::stalled`
//! (`decide`) applies it when an attempt ends.

use std::time::Duration;

/// Restarts in a row without progress after which the job ends (NVIDIA's NVRx stops after
/// as many: `max_no_progress_restarts`).
pub(super) const NO_PROGRESS_RESTARTS: u32 = 3;

/// An attempt whose workers printed no step and left no new checkpoint made progress if it
/// ran this long: 10 minutes, after which Kubernetes takes a restarted container for one
/// that runs fine (it resets its crash-loop back-off).
pub(super) const RAN_LONG: Duration = Duration::from_secs(600);

/// What one attempt did, as far as its progress goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Done {
    /// The highest training step any of its ranks printed (their metrics lines).
    pub(super) step: Option<u64>,
    /// Whether it left a newer checkpoint than it resumed from.
    pub(super) checkpoint: bool,
    /// How long it ran.
    pub(super) ran: Duration,
}

/// Whether an attempt made progress, `best` being the highest step any earlier attempt of
/// this allocation printed: a step beyond it, or a newer checkpoint than it resumed from;
/// an attempt that printed no step at all also when it ran [`RAN_LONG`] (herd cannot see
/// its steps, and a job that fails only after that long is not failing at its start).
pub(super) fn progressed(best: Option<u64>, done: &Done) -> bool {
    let beyond = match (done.step, best) {
        (Some(step), Some(best)) => step > best,
        (Some(_), None) => true,
        (None, _) => done.ran >= RAN_LONG,
    };
    beyond || done.checkpoint
}

/// The progress of this allocation's attempts.
#[derive(Debug, Default)]
pub(super) struct Stall {
    /// The highest step any finished attempt printed.
    pub(super) best: Option<u64>,
    /// The highest step the other nodes reported for the attempt that is ending.
    pub(super) heard: Option<u64>,
    /// Restarts in a row that made no progress.
    pub(super) restarts: u32,
}

impl Stall {
    /// A follower's highest step of the attempt that is ending (it says so with its
    /// teardown).
    pub(super) fn heard(&mut self, step: Option<u64>) {
        self.heard = self.heard.max(step);
    }

    /// The attempt is over; `restart`: it was a restart. Whether it made progress; the
    /// restarts in a row that made none are counted.
    pub(super) fn close(&mut self, done: Done, restart: bool) -> bool {
        let progressed = progressed(self.best, &done);
        self.best = self.best.max(done.step);
        self.heard = None;
        if progressed {
            self.restarts = 0;
        } else if restart {
            self.restarts += 1;
        }
        progressed
    }

    /// Why restarts stop now, when [`NO_PROGRESS_RESTARTS`] in a row made no progress.
    pub(super) fn stuck(&self) -> Option<String> {
        if self.restarts < NO_PROGRESS_RESTARTS {
            return None;
        }
        let what = match self.best {
            Some(best) => format!("no step beyond {best}"),
            None => format!(
                "no step in the workers' output, no new checkpoint, none ran {} min",
                RAN_LONG.as_secs() / 60
            ),
        };
        Some(format!(
            "{} restarts in a row made no progress ({what})",
            self.restarts
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(step: Option<u64>, checkpoint: bool, ran_s: u64) -> Done {
        Done {
            step,
            checkpoint,
            ran: Duration::from_secs(ran_s),
        }
    }

    #[test]
    fn progress_is_a_step_beyond_the_best_or_a_new_checkpoint() {
        // Steps: beyond the best of the earlier attempts, or not.
        assert!(progressed(None, &done(Some(5), false, 3)));
        assert!(progressed(Some(120), &done(Some(121), false, 3)));
        assert!(!progressed(Some(120), &done(Some(120), false, 3_600)));
        assert!(!progressed(Some(120), &done(Some(80), false, 3_600)));
        // A newer checkpoint is progress whatever the steps say (a step count that
        // restarts from 0 in every attempt of a job that resumes).
        assert!(progressed(Some(120), &done(Some(20), true, 30)));
        // No step printed: a new checkpoint, or a run long enough not to be a failing start.
        assert!(!progressed(None, &done(None, false, 5)));
        assert!(!progressed(Some(120), &done(None, false, 599)));
        assert!(progressed(Some(120), &done(None, false, 600)));
        assert!(progressed(None, &done(None, true, 5)));
    }

    #[test]
    fn three_restarts_in_a_row_without_progress_stop() {
        let mut s = Stall::default();
        // The first attempt reaches step 120 and fails; it was no restart.
        assert!(s.close(done(Some(120), false, 60), false));
        assert_eq!(s.stuck(), None);
        // Restarts that fail before passing 120.
        assert!(!s.close(done(Some(100), false, 60), true));
        assert!(!s.close(done(None, false, 5), true));
        assert_eq!(s.stuck(), None);
        assert!(!s.close(done(Some(120), false, 60), true));
        assert_eq!(
            s.stuck().as_deref(),
            Some("3 restarts in a row made no progress (no step beyond 120)")
        );
        // One that gets further starts the count again.
        assert!(s.close(done(Some(140), false, 60), true));
        assert_eq!(s.stuck(), None);
        assert!(!s.close(done(Some(140), false, 60), true));
        assert_eq!(s.restarts, 1);
    }

    #[test]
    fn a_first_attempt_without_progress_is_not_a_restart_and_steps_come_from_every_node() {
        let mut s = Stall::default();
        assert!(!s.close(done(None, false, 2), false));
        assert_eq!(s.restarts, 0);
        for _ in 0..3 {
            assert!(!s.close(done(None, false, 2), true));
        }
        assert_eq!(
            s.stuck().as_deref(),
            Some("3 restarts in a row made no progress (no step in the workers' output, no new checkpoint, none ran 10 min)")
        );
        // The nodes' steps heard for an attempt count for it, then are forgotten.
        let mut s = Stall::default();
        s.heard(Some(7));
        s.heard(None);
        s.heard(Some(3));
        assert_eq!(s.heard, Some(7));
        assert!(s.close(done(s.heard, false, 1), false));
        assert_eq!((s.best, s.heard), (Some(7), None));
    }
}
