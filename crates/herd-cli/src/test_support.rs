//! What the commands' unit tests share: an experiment folder under a temporary root.

use std::path::PathBuf;

use serde_json::json;

/// An experiment `train` under a temporary root, submitted as job 4242. Each command's
/// tests add the methods they need (events, log lines, readings) in their own `impl`.
pub(crate) struct Exp {
    _tmp: tempfile::TempDir,
    /// The experiment root.
    pub root: PathBuf,
    /// The experiment folder.
    pub dir: PathBuf,
}

impl Exp {
    pub(crate) fn new() -> Exp {
        let tmp = tempfile::tempdir().expect("tempdir");
        let project = tmp.path().join("project");
        std::fs::create_dir_all(&project).expect("project");
        let root = tmp.path().join("exps");
        let created = herd_exp::NewExperiment::new(
            &root,
            "train",
            &project,
            json!({"nodes": 2}),
            herd_exp::Invocation::current("test"),
        )
        .create()
        .expect("experiment");
        created.experiment.record_job_id(1, "4242").expect("job id");
        let dir = created.experiment.dir().to_owned();
        Exp {
            _tmp: tmp,
            root,
            dir,
        }
    }

    /// Attempt K's folder, made.
    pub(crate) fn attempt_dir(&self, k: u32) -> herd_exp::layout::AttemptDir {
        let d = herd_exp::ExperimentDir::new(&self.dir).logs().attempt(k);
        std::fs::create_dir_all(d.path()).expect("attempt dir");
        d
    }
}

/// Event `name` with `fields`, as a line of the timeline has them: read through
/// [`herd_exp::timeline::Event`], so a test cannot write what herd would not read.
pub(crate) fn event(name: &str, fields: serde_json::Value) -> herd_exp::timeline::Event {
    let mut m = match fields {
        serde_json::Value::Object(m) => m,
        other => panic!("{other}: not an object"),
    };
    m.insert("event".into(), json!(name));
    serde_json::from_value(serde_json::Value::Object(m.clone()))
        .unwrap_or_else(|e| panic!("{m:?}: not a timeline event: {e}"))
}

/// A line of the timeline with `fields` (`event`, `unix_ms`, …), read.
pub(crate) fn entry(fields: serde_json::Value) -> herd_exp::timeline::Entry {
    let e = herd_exp::timeline::Entry::parse(&fields.to_string());
    assert!(
        !matches!(e.event, herd_exp::timeline::Event::Other(_)),
        "{fields}: not a timeline event: {e:?}"
    );
    e
}
