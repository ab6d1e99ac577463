//! Where an experiment's job stands, read from its folder alone: the manifest's job ids and
//! the timeline's events (`herd status`, `herd submit --wait` and `herd cancel` add what
//! the scheduler tells them to this).

use std::path::{Path, PathBuf};

use crate::timeline::{self, Entry, Event};
use crate::{Error, Experiment};

/// An experiment's job as its folder tells it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Progress {
    /// The current submission's job id (the newest one sbatch gave).
    pub job_id: Option<String>,
    /// How many submissions (the first, then each `--resume`).
    pub submissions: usize,
    /// When the experiment was created, seconds since the epoch (0 when unknown).
    pub created_unix: u64,
    /// How many attempts started over the experiment (`logs/attempt-K` folders used).
    pub attempts: usize,
    /// The current job's newest attempt number K.
    pub attempt: Option<u64>,
    /// When the current job was queued (ms since the epoch).
    pub queued_ms: Option<u64>,
    /// When its agents last started (after a requeue: again).
    pub started_ms: Option<u64>,
    /// When its agents last met (rendezvous), after they last started.
    pub rendezvous_ms: Option<u64>,
    /// When its workers' first line came, in the newest attempt.
    pub first_output_ms: Option<u64>,
    /// How often the current job was requeued: by herd, or by its own code and taken by
    /// herd as the attempt's requeue (those also in `requeues_by_job`).
    pub requeues: usize,
    /// Of `requeues`, those the job's own code did (Lightning's SLURM auto-requeue, a
    /// user's `scontrol requeue`): `"by": "job"` in the timeline.
    pub requeues_by_job: usize,
    /// Restarts inside the allocation, over the current job.
    pub restarts: usize,
    /// Nodes a spare took the place of, over the current job: (node, spare).
    pub replaced: Vec<(String, String)>,
    /// How the agents said the job ended: `(ok, cause)`.
    pub finished: Option<(bool, Option<String>)>,
    /// `herd cancel` cancelled the current job (when, ms since the epoch).
    pub cancelled_ms: Option<u64>,
    /// The end the scheduler showed for the current job, as `herd status` recorded it.
    pub ended: Option<Ended>,
    /// The newest failure over the experiment, in one line.
    pub last_failure: Option<String>,
    /// That failure's likely cause and fix, when the agents knew it
    /// ([`crate::failure::hints`]).
    pub last_hint: Option<String>,
}

/// The end of a job as the scheduler showed it (event `ended`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// SLURM's final state, e.g. `COMPLETED`, `FAILED`, `CANCELLED`, `TIMEOUT`.
    pub state: String,
    /// The exit code as a shell gives it.
    pub exit_code: i64,
    /// SLURM's reason, when it gave one.
    pub reason: Option<String>,
}

impl Progress {
    /// Reads `exp`'s manifest and timeline.
    pub fn read(exp: &Experiment) -> Result<Progress, Error> {
        let manifest = exp.manifest()?;
        let events = timeline::read(exp.dir()).map_err(|source| Error::Io {
            action: "cannot read",
            path: exp.paths().timeline(),
            source,
        })?;
        let job_id = manifest
            .submissions
            .iter()
            .rev()
            .find_map(|a| a.job_id.clone());
        let mut p = Progress::from_events(job_id, manifest.submissions.len(), &events);
        p.created_unix = manifest.created_unix;
        Ok(p)
    }

    /// The progress of job `job_id` from the experiment's `events`.
    pub fn from_events(job_id: Option<String>, submissions: usize, events: &[Entry]) -> Progress {
        let mut p = Progress {
            job_id: job_id.clone(),
            submissions,
            ..Progress::default()
        };
        let of_job = |e: &Entry| {
            job_id
                .as_deref()
                .is_some_and(|id| e.event.job_id().is_some_and(|j| j == id))
        };
        // The current job's events start with its first event: `queued`, written by
        // `herd submit` once sbatch answered, or the agents' `started` when the job
        // started before that.
        let start = events.iter().position(of_job).unwrap_or(0);
        for (i, e) in events.iter().enumerate() {
            match &e.event {
                Event::AttemptStarted(_) => p.attempts += 1,
                Event::Failed(f) if !f.cause.is_empty() => {
                    p.last_failure = Some(f.cause.clone());
                    p.last_hint.clone_from(&f.hint);
                }
                _ => {}
            }
            if i < start {
                continue;
            }
            let ms = e.unix_ms;
            match &e.event {
                Event::Queued(_) => p.queued_ms = ms,
                Event::Started(_) => {
                    p.started_ms = ms;
                    p.rendezvous_ms = None;
                    p.first_output_ms = None;
                    p.finished = None;
                }
                Event::Rendezvous(_) => p.rendezvous_ms = ms,
                Event::AttemptStarted(a) => {
                    p.attempt = Some(u64::from(a.attempt));
                    p.first_output_ms = None;
                }
                Event::FirstOutput(_) => p.first_output_ms = ms,
                Event::Restart(_) => p.restarts += 1,
                Event::Replace(r) if !r.node.is_empty() && !r.by.is_empty() => {
                    p.replaced.push((r.node.clone(), r.by.clone()));
                }
                Event::Requeue(r) => {
                    // Back in the queue: what the allocation did is over.
                    p.requeues += 1;
                    if r.by == Some(timeline::RequeuedBy::Job) {
                        p.requeues_by_job += 1;
                    }
                    p.started_ms = None;
                    p.rendezvous_ms = None;
                    p.first_output_ms = None;
                }
                Event::Finished(f) => p.finished = Some((f.ok, f.cause.clone())),
                Event::Cancelled(c) if c.job_id.is_none() || of_job(e) => p.cancelled_ms = ms,
                Event::Ended(x) if of_job(e) => {
                    p.ended = Some(Ended {
                        state: x.state.clone(),
                        exit_code: x.exit_code.map_or(1, i64::from),
                        reason: x.reason.clone(),
                    })
                }
                _ => {}
            }
        }
        p
    }
}

/// Every experiment directly under `exp_root` (folders with a manifest; temporary folders
/// of a submit in progress are not), by name; none when the root does not exist.
pub fn list(exp_root: &Path) -> Result<Vec<Experiment>, Error> {
    let entries = match std::fs::read_dir(exp_root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(Error::Io {
                action: "cannot list",
                path: exp_root.to_owned(),
                source,
            })
        }
    };
    let mut found: Vec<PathBuf> = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if name.starts_with('.') || !crate::ExperimentDir::new(&path).manifest().is_file() {
            continue;
        }
        found.push(path);
    }
    found.sort();
    found
        .iter()
        .map(|path| Experiment::open_dir(path))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// A line of the timeline as herd writes it, read.
    fn ev(event: &str, unix_ms: u64, fields: Value) -> Entry {
        let mut m = serde_json::Map::new();
        m.insert("event".into(), event.into());
        m.insert("unix_ms".into(), unix_ms.into());
        if let Value::Object(f) = fields {
            m.extend(f);
        }
        let e = Entry::parse(&Value::Object(m).to_string());
        assert!(!matches!(e.event, Event::Other(_)), "{e:?}");
        e
    }

    /// A sweep's run: `herd submit` and the agents both name its array task `ARRAYID_TASK`.
    #[test]
    fn an_array_tasks_events_are_its_own() {
        let events = vec![
            ev("queued", 1, json!({"submission": 1, "job_id": "77_2"})),
            ev("started", 2, json!({"job_id": "77_2"})),
            ev("finished", 5, json!({"ok": true})),
            ev(
                "ended",
                6,
                json!({"job_id": "77_2", "state": "COMPLETED", "exit_code": 0}),
            ),
            ev(
                "ended",
                7,
                json!({"job_id": "77", "state": "FAILED", "exit_code": 1}),
            ),
        ];
        let p = Progress::from_events(Some("77_2".into()), 1, &events);
        assert_eq!((p.queued_ms, p.started_ms), (Some(1), Some(2)));
        assert_eq!(p.finished, Some((true, None)));
        assert_eq!(p.ended.map(|e| e.state), Some("COMPLETED".to_owned()));
    }

    #[test]
    fn the_current_job_is_read_from_its_own_events() {
        let events = vec![
            ev("queued", 1, json!({"submission": 1, "job_id": "10"})),
            ev("started", 2, json!({"job_id": "10"})),
            ev("attempt_started", 3, json!({"attempt": 0})),
            ev(
                "failed",
                4,
                json!({"attempt": 0, "cause": "rank 1 exited with code 3"}),
            ),
            ev(
                "finished",
                5,
                json!({"attempt": 0, "ok": false, "cause": "worker_failure"}),
            ),
            ev(
                "ended",
                6,
                json!({"job_id": "10", "state": "FAILED", "exit_code": 1}),
            ),
            ev("queued", 7, json!({"submission": 2, "job_id": "11"})),
            ev("started", 8, json!({"job_id": "11"})),
            ev("rendezvous", 9, json!({})),
            ev("attempt_started", 10, json!({"attempt": 1})),
            ev("first_output", 11, json!({"attempt": 1})),
            ev("requeue", 12, json!({"attempt": 1})),
            ev("started", 13, json!({"job_id": "11"})),
            ev("attempt_started", 14, json!({"attempt": 2})),
        ];
        let p = Progress::from_events(Some("11".into()), 2, &events);
        assert_eq!(p.attempts, 3, "over the experiment");
        assert_eq!(p.attempt, Some(2));
        assert_eq!(p.queued_ms, Some(7));

        assert_eq!(p.started_ms, Some(13), "started again after the requeue");
        assert_eq!(p.rendezvous_ms, None, "not yet after the new start");
        assert_eq!(p.first_output_ms, None);
        assert_eq!(p.requeues, 1);
        assert_eq!(p.requeues_by_job, 0, "herd's own");
        assert_eq!(p.finished, None, "the first job's end is not this one's");
        assert_eq!(p.ended, None);
        assert_eq!(p.last_failure.as_deref(), Some("rank 1 exited with code 3"));

        // A requeue the job's own code did (Lightning's SLURM plugin), which herd took.
        let mut own = events.clone();
        let at = own
            .iter()
            .position(|e| e.event.kind() == "requeue")
            .expect("a requeue");
        if let Event::Requeue(r) = &mut own[at].event {
            r.by = Some(timeline::RequeuedBy::Job);
        }
        let p = Progress::from_events(Some("11".into()), 2, &own);
        assert_eq!((p.requeues, p.requeues_by_job), (1, 1), "{p:?}");

        // A spare took a node's place in the current job (and one in the first job's,
        // which is not this job's story).
        let mut spared = events.clone();
        spared.insert(
            2,
            ev("replace", 2, json!({"node": "gpu-a09", "by": "gpu-a10"})),
        );
        spared.push(ev(
            "replace",
            15,
            json!({"node": "gpu-a02", "by": "gpu-a03"}),
        ));
        let p = Progress::from_events(Some("11".into()), 2, &spared);
        assert_eq!(p.replaced, [("gpu-a02".to_owned(), "gpu-a03".to_owned())]);
        assert_eq!(
            crate::progress::Progress::default().replaced,
            Vec::<(String, String)>::new()
        );

        // A job that started before `herd submit` wrote `queued` (sbatch answered late),
        // its id a number as the agents write it.
        let mut raced = events.clone();
        raced.swap(6, 7);
        raced[6] = ev("started", 8, json!({"job_id": 11}));
        let p = Progress::from_events(Some("11".into()), 2, &raced);
        assert_eq!(p.started_ms, Some(13), "{p:?}");
        assert_eq!(p.requeues, 1, "{p:?}");
        assert_eq!(p.queued_ms, Some(7));
        assert_eq!(p.finished, None, "the first job's end is not this one's");
        let p = Progress::from_events(Some("11".into()), 2, &raced[..9]);
        assert_eq!(
            p.started_ms,
            Some(8),
            "started before queued was written: {p:?}"
        );
        assert_eq!(p.rendezvous_ms, Some(9));

        let requeued = Progress::from_events(Some("11".into()), 2, &events[..12]);
        assert_eq!(
            (requeued.started_ms, requeued.first_output_ms),
            (None, None),
            "back in the queue after the requeue"
        );

        let first = Progress::from_events(Some("10".into()), 1, &events[..6]);
        assert_eq!(
            first.finished,
            Some((false, Some("worker_failure".to_owned())))
        );
        assert_eq!(
            first.ended,
            Some(Ended {
                state: "FAILED".into(),
                exit_code: 1,
                reason: None
            })
        );
    }

    #[test]
    fn lists_experiments_and_skips_the_rest() {
        let root = tempfile::tempdir().expect("tempdir");
        assert!(list(&root.path().join("missing")).expect("none").is_empty());
        for name in ["b", "a", ".herd-new-1", "not-an-experiment"] {
            std::fs::create_dir(root.path().join(name)).expect("mkdir");
        }
        for name in ["b", "a", ".herd-new-1"] {
            std::fs::write(
                crate::ExperimentDir::new(root.path().join(name)).manifest(),
                "{}",
            )
            .expect("manifest");
        }
        let names: Vec<String> = list(root.path())
            .expect("lists")
            .iter()
            .map(|e| e.name().to_owned())
            .collect();
        assert_eq!(names, ["a", "b"]);
    }
}
