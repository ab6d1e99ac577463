use std::collections::BTreeSet;

use serde_json::Value;

use super::*;
use crate::failure::Exit;

const T: &str = "2026-11-30T17:40:12.123Z";
const MS: u64 = 1_796_060_412_123;

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| (*s).to_owned()).collect()
}

/// One event of every kind, every field given (every `Option` a `Some`), in the order of
/// [`kinds`].
fn samples() -> Vec<Event> {
    let nodes = vec![
        NodeRanks {
            node: 0,
            host: "gpu-a01".into(),
            ranks: vec![0, 1],
        },
        NodeRanks {
            node: 1,
            host: "gpu-a02".into(),
            ranks: vec![2, 3],
        },
    ];
    vec![
        Queued {
            submission: 2,
            job_id: Some("4242".into()),
        }
        .into(),
        Started {
            job_id: Some("40_2".into()),
            host: "gpu-a01".into(),
            nodes: strings(&["gpu-a01", "gpu-a02"]),
            requeue: 1,
        }
        .into(),
        Rendezvous {
            world_size: 4,
            master_addr: "10.0.0.1".into(),
            nodes: Some(nodes),
            spares: Some(strings(&["gpu-a03"])),
        }
        .into(),
        PreflightFailed {
            attempt: 0,
            node: "gpu-a02".into(),
            check: "python".into(),
            detail: "cannot import torch".into(),
        }
        .into(),
        AttemptStarted {
            attempt: 3,
            master_port: 29_500,
            resume_from: Some("/ckpt/step-100".into()),
            restarts: Some(1),
            requeue: 2,
            nodes: Some(strings(&["gpu-a01", "gpu-a03"])),
            spares: Some(Vec::new()),
        }
        .into(),
        FirstOutput { attempt: 3 }.into(),
        Signal {
            attempt: 3,
            signal: "SIGTERM".into(),
            action: Action::Requeued,
            cause: Some("preemption".into()),
            node: Some(1),
            by: Some(RequeuedBy::Job),
            seen: Some(SeenIn::WorkerExit),
        }
        .into(),
        Warning {
            attempt: 3,
            cause: "time_limit".into(),
            stop_signal: "SIGUSR1".into(),
            grace_s: 60.5,
        }
        .into(),
        WorkerExit {
            attempt: 3,
            rank: Some(2),
            how: "rank 2 (local rank 0 on gpu-a02) killed by SIGKILL".into(),
            exit: Some(Exit::Signal("SIGKILL".into())),
            during: Some(During::Stop),
            node: Some(1),
        }
        .into(),
        Hang {
            attempt: 3,
            rank: 1,
            host: "gpu-a01".into(),
            pid: 4711,
            silent_s: 37.5,
            started: true,
            timeout_s: 37.5,
            timeout: "auto: 5 × longest gap 7.5 s = 37.5 s".into(),
        }
        .into(),
        GpuError {
            attempt: 3,
            node: "gpu-a02".into(),
            gpu: 1,
            uuid: "GPU-b".into(),
            ranks: vec![3],
            xid: Some(79),
            what: "the GPU fell off the bus: it no longer answers the host".into(),
            hardware: true,
        }
        .into(),
        Failed {
            attempt: 3,
            cause: "rank 2 (local rank 0 on gpu-a02) exited with code 3".into(),
            kind: Some("worker_failure".into()),
            rank: Some(2),
            exit: Some(Exit::Code(3)),
            hint: Some("CUDA out of memory: lower the batch size".into()),
            node: Some(1),
        }
        .into(),
        Blame {
            attempt: 3,
            node: "gpu-a02".into(),
            kind: "lost".into(),
            why: "no heartbeat for 10 s".into(),
        }
        .into(),
        Teardown { attempt: 3 }.into(),
        Checkpoint {
            attempt: 3,
            path: "/ckpt/step-200".into(),
        }
        .into(),
        Replace {
            attempt: 3,
            node: "gpu-a02".into(),
            by: "gpu-a03".into(),
            kind: "lost".into(),
            why: "no heartbeat for 10 s".into(),
            spares_left: 0,
        }
        .into(),
        Restart { attempt: 4 }.into(),
        RestartsStopped {
            attempt: 4,
            restarts: 2,
            step: Some(200),
            max_restarts: 5,
            left: 3,
        }
        .into(),
        Requeue {
            attempt: 4,
            cause: "node_failure".into(),
            count: 1,
            budget: 3,
            exclude: strings(&["gpu-a02"]),
            by: Some(RequeuedBy::Job),
        }
        .into(),
        RequeueRefused {
            attempt: 4,
            cause: "preemption".into(),
            used: 3,
            budget: 3,
            by: Some(RequeuedBy::Job),
        }
        .into(),
        RequeueFailed {
            attempt: 4,
            error: "scontrol: Invalid job id".into(),
        }
        .into(),
        Finished {
            attempt: 4,
            ok: false,
            cause: Some("worker_failure".into()),
        }
        .into(),
        Cancelled {
            job_id: Some("4242".into()),
            by: "herd cancel".into(),
            user: Some("ada".into()),
            why: "experiment train".into(),
        }
        .into(),
        Ended {
            job_id: Some("4242".into()),
            state: "FAILED".into(),
            exit_code: Some(1),
            reason: Some("NonZeroExitCode".into()),
        }
        .into(),
    ]
}

fn entry(event: Event) -> Entry {
    Entry {
        time: Some(T.into()),
        unix_ms: Some(MS),
        event,
    }
}

#[test]
fn every_kind_is_written_and_read_back_equal() {
    for event in samples() {
        let e = entry(event);
        assert!(!matches!(e.event, Event::Other(_)));
        let line = e.line().expect("a line");
        assert!(!line.contains('\n'), "{line}");
        assert_eq!(Entry::parse(&line), e, "{line}");
    }
}

/// The samples are one of each kind, and each writes exactly the fields its kind describes
/// (with the envelope): a field added to a kind, renamed or flattened shows in the table.
#[test]
fn each_kind_writes_the_fields_the_table_describes() {
    let samples = samples();
    let kinds = kinds();
    let names: Vec<&str> = samples.iter().map(Event::kind).collect();
    let described: Vec<&str> = kinds.iter().map(|k| k.name).collect();
    assert_eq!(
        names, described,
        "one sample of each kind, in the table's order"
    );
    for (event, kind) in samples.into_iter().zip(&kinds) {
        let line = entry(event).line().expect("a line");
        let Value::Object(m) = serde_json::from_str(&line).expect("JSON") else {
            panic!("{line}: not an object");
        };
        assert_eq!(m["event"], kind.name, "{line}");
        let written: BTreeSet<&str> = m.keys().map(String::as_str).collect();
        let mut want: BTreeSet<&str> = kind.fields.iter().map(|f| f.name).collect();
        assert_eq!(
            want.len(),
            kind.fields.len(),
            "{}: a field twice",
            kind.name
        );
        want.extend(["event", "time", "unix_ms"]);
        assert_eq!(written, want, "{}: {line}", kind.name);
        for f in &kind.fields {
            assert!(
                !f.what.is_empty() && !f.ty.is_empty(),
                "{}.{}",
                kind.name,
                f.name
            );
        }
    }
}

/// Lines as herd wrote them before the type (the writers' `json!`, keys in alphabetical
/// order as serde_json writes a map), and as tests and benchmarks in this repository write
/// them: each is the kind it says, with its fields.
#[test]
fn older_lines_read_as_their_kinds() {
    let env = |s: &str| {
        format!(
            "{},\"time\":\"{T}\",\"unix_ms\":{MS}}}",
            s.trim_end_matches('}')
        )
    };
    let cases: Vec<(String, Event)> = vec![
        (
            env(r#"{"event":"queued","job_id":"4242","submission":1}"#),
            Queued {
                submission: 1,
                job_id: Some("4242".into()),
            }
            .into(),
        ),
        (
            // A plain job's id, as the agents wrote it: a number.
            env(
                r#"{"event":"started","host":"gpu-a01","job_id":4242,"nodes":["gpu-a01","gpu-a02"],"requeue":0}"#,
            ),
            Started {
                job_id: Some("4242".into()),
                host: "gpu-a01".into(),
                nodes: strings(&["gpu-a01", "gpu-a02"]),
                requeue: 0,
            }
            .into(),
        ),
        (
            env(r#"{"event":"started","host":"n0","job_id":"40_2","nodes":["n0"],"requeue":1}"#),
            Started {
                job_id: Some("40_2".into()),
                host: "n0".into(),
                nodes: strings(&["n0"]),
                requeue: 1,
            }
            .into(),
        ),
        (
            env(r#"{"event":"started","host":"n0","job_id":null,"nodes":["n0"],"requeue":0}"#),
            Started {
                job_id: None,
                host: "n0".into(),
                nodes: strings(&["n0"]),
                requeue: 0,
            }
            .into(),
        ),
        (
            // docs/logs.md's example.
            r#"{"event": "rendezvous", "world_size": 4, "master_addr": "10.0.0.1",
 "nodes": [{"node": 0, "host": "gpu-a01", "ranks": [0, 1]}, {"node": 1, "host": "gpu-a02", "ranks": [2, 3]}]}"#
                .replace('\n', ""),
            Rendezvous {
                world_size: 4,
                master_addr: "10.0.0.1".into(),
                nodes: Some(vec![
                    NodeRanks {
                        node: 0,
                        host: "gpu-a01".into(),
                        ranks: vec![0, 1],
                    },
                    NodeRanks {
                        node: 1,
                        host: "gpu-a02".into(),
                        ranks: vec![2, 3],
                    },
                ]),
                spares: None,
            }
            .into(),
        ),
        (
            // Without a node list (herd-exp's History tests).
            r#"{"event": "rendezvous", "world_size": 2}"#.to_owned(),
            Rendezvous {
                world_size: 2,
                ..Rendezvous::default()
            }
            .into(),
        ),
        (
            env(
                r#"{"attempt":0,"event":"attempt_started","master_port":41234,"requeue":0,"restarts":0,"resume_from":null}"#,
            ),
            AttemptStarted {
                master_port: 41_234,
                restarts: Some(0),
                ..AttemptStarted::default()
            }
            .into(),
        ),
        (
            // The first herd with a timeline: no `restarts`, no `requeue`.
            env(
                r#"{"attempt":0,"event":"attempt_started","master_port":29500,"resume_from":"/ckpt/a"}"#,
            ),
            AttemptStarted {
                master_port: 29_500,
                resume_from: Some("/ckpt/a".into()),
                ..AttemptStarted::default()
            }
            .into(),
        ),
        (
            env(r#"{"attempt":0,"event":"first_output"}"#),
            FirstOutput { attempt: 0 }.into(),
        ),
        (
            // Ignored while stopping: no cause.
            env(
                r#"{"action":"ignored (stopping)","attempt":1,"event":"signal","node":null,"signal":"SIGTERM"}"#,
            ),
            Signal {
                attempt: 1,
                signal: "SIGTERM".into(),
                action: Action::IgnoredStopping,
                ..Signal::default()
            }
            .into(),
        ),
        (
            env(
                r#"{"action":"requeued","attempt":2,"by":"job","cause":"time_limit","event":"signal","node":1,"seen":"worker_exit","signal":"SIGTERM"}"#,
            ),
            Signal {
                attempt: 2,
                signal: "SIGTERM".into(),
                action: Action::Requeued,
                cause: Some("time_limit".into()),
                node: Some(1),
                by: Some(RequeuedBy::Job),
                seen: Some(SeenIn::WorkerExit),
            }
            .into(),
        ),
        (
            env(
                r#"{"attempt":0,"cause":"time_limit","event":"warning","grace_s":60.0,"stop_signal":"SIGUSR1"}"#,
            ),
            Warning {
                attempt: 0,
                cause: "time_limit".into(),
                stop_signal: "SIGUSR1".into(),
                grace_s: 60.0,
            }
            .into(),
        ),
        (
            // Before `exit`: the prose alone.
            env(
                r#"{"attempt":0,"event":"worker_exit","how":"rank 1 (local rank 1 on gpu-a01) exited with code 3","rank":1}"#,
            ),
            WorkerExit {
                attempt: 0,
                rank: Some(1),
                how: "rank 1 (local rank 1 on gpu-a01) exited with code 3".into(),
                ..WorkerExit::default()
            }
            .into(),
        ),
        (
            env(r#"{"attempt":1,"during":"stop","event":"worker_exit","how":"exited 0","rank":0}"#),
            WorkerExit {
                attempt: 1,
                rank: Some(0),
                how: "exited 0".into(),
                during: Some(During::Stop),
                ..WorkerExit::default()
            }
            .into(),
        ),
        (
            env(
                r#"{"attempt":0,"event":"hang","host":"gpu-a01","pid":4711,"rank":1,"silent_s":12.5,"started":false,"timeout":"10 s","timeout_s":10.0}"#,
            ),
            Hang {
                attempt: 0,
                rank: 1,
                host: "gpu-a01".into(),
                pid: 4711,
                silent_s: 12.5,
                started: false,
                timeout_s: 10.0,
                timeout: "10 s".into(),
            }
            .into(),
        ),
        (
            env(
                r#"{"attempt":0,"event":"gpu_error","gpu":1,"hardware":false,"node":"gpu-a02","ranks":[3],"uuid":"GPU-b","what":"graphics engine exception","xid":13}"#,
            ),
            GpuError {
                attempt: 0,
                node: "gpu-a02".into(),
                gpu: 1,
                uuid: "GPU-b".into(),
                ranks: vec![3],
                xid: Some(13),
                what: "graphics engine exception".into(),
                hardware: false,
            }
            .into(),
        ),
        (
            // The rendezvous failed: no kind.
            env(r#"{"attempt":0,"cause":"rendezvous: node 1 never came","event":"failed"}"#),
            Failed {
                cause: "rendezvous: node 1 never came".into(),
                ..Failed::default()
            }
            .into(),
        ),
        (
            env(
                r#"{"attempt":2,"cause":"rank 3 (local rank 1 on gpu-a02) exited with code 1","event":"failed","hint":"lower the batch size","kind":"worker_failure"}"#,
            ),
            Failed {
                attempt: 2,
                cause: "rank 3 (local rank 1 on gpu-a02) exited with code 1".into(),
                kind: Some("worker_failure".into()),
                hint: Some("lower the batch size".into()),
                ..Failed::default()
            }
            .into(),
        ),
        (
            // Node 1 acting for a lost leader.
            env(
                r#"{"attempt":0,"cause":"lost node 0 (n0), the leader: silent","event":"failed","kind":"node_failure","node":1}"#,
            ),
            Failed {
                cause: "lost node 0 (n0), the leader: silent".into(),
                kind: Some("node_failure".into()),
                node: Some(1),
                ..Failed::default()
            }
            .into(),
        ),
        (
            env(r#"{"attempt":0,"event":"teardown"}"#),
            Teardown { attempt: 0 }.into(),
        ),
        (
            env(r#"{"attempt":0,"event":"checkpoint","path":"/ckpt/step-10"}"#),
            Checkpoint {
                attempt: 0,
                path: "/ckpt/step-10".into(),
            }
            .into(),
        ),
        (
            env(r#"{"attempt":1,"event":"restart"}"#),
            Restart { attempt: 1 }.into(),
        ),
        (
            env(
                r#"{"attempt":3,"event":"restarts_stopped","left":2,"max_restarts":5,"restarts":3,"step":null}"#,
            ),
            RestartsStopped {
                attempt: 3,
                restarts: 3,
                step: None,
                max_restarts: 5,
                left: 2,
            }
            .into(),
        ),
        (
            env(
                r#"{"attempt":1,"budget":3,"cause":"node_failure","count":1,"event":"requeue","exclude":["gpu-a02"]}"#,
            ),
            Requeue {
                attempt: 1,
                cause: "node_failure".into(),
                count: 1,
                budget: 3,
                exclude: strings(&["gpu-a02"]),
                by: None,
            }
            .into(),
        ),
        (
            env(
                r#"{"attempt":1,"budget":1,"by":"job","cause":"preemption","event":"requeue_refused","used":1}"#,
            ),
            RequeueRefused {
                attempt: 1,
                cause: "preemption".into(),
                used: 1,
                budget: 1,
                by: Some(RequeuedBy::Job),
            }
            .into(),
        ),
        (
            env(r#"{"attempt":1,"error":"denied","event":"requeue_failed"}"#),
            RequeueFailed {
                attempt: 1,
                error: "denied".into(),
            }
            .into(),
        ),
        (
            env(r#"{"attempt":1,"event":"finished","ok":true}"#),
            Finished {
                attempt: 1,
                ok: true,
                cause: None,
            }
            .into(),
        ),
        (
            env(
                r#"{"by":"herd cancel","event":"cancelled","job_id":"4242","user":null,"why":"experiment train"}"#,
            ),
            Cancelled {
                job_id: Some("4242".into()),
                by: "herd cancel".into(),
                user: None,
                why: "experiment train".into(),
            }
            .into(),
        ),
        (
            env(
                r#"{"event":"ended","exit_code":0,"job_id":"4242","reason":null,"state":"COMPLETED"}"#,
            ),
            Ended {
                job_id: Some("4242".into()),
                state: "COMPLETED".into(),
                exit_code: Some(0),
                reason: None,
            }
            .into(),
        ),
        (
            env(
                r#"{"attempt":0,"event":"blame","kind":"preflight","node":"gpu-a02","why":"preflight check `gpus` failed: none"}"#,
            ),
            Blame {
                attempt: 0,
                node: "gpu-a02".into(),
                kind: "preflight".into(),
                why: "preflight check `gpus` failed: none".into(),
            }
            .into(),
        ),
        (
            env(
                r#"{"attempt":0,"by":"gpu-a03","event":"replace","kind":"lost","node":"gpu-a02","spares_left":0,"why":"silent"}"#,
            ),
            Replace {
                attempt: 0,
                node: "gpu-a02".into(),
                by: "gpu-a03".into(),
                kind: "lost".into(),
                why: "silent".into(),
                spares_left: 0,
            }
            .into(),
        ),
        (
            env(
                r#"{"attempt":0,"check":"port","detail":"refused","event":"preflight_failed","node":"gpu-a02"}"#,
            ),
            PreflightFailed {
                attempt: 0,
                node: "gpu-a02".into(),
                check: "port".into(),
                detail: "refused".into(),
            }
            .into(),
        ),
    ];
    let mut kinds_seen = BTreeSet::new();
    for (line, want) in cases {
        let e = Entry::parse(&line);
        assert_eq!(e.event, want, "{line}");
        kinds_seen.insert(e.event.kind().to_owned());
        if line.contains("unix_ms") {
            assert_eq!(
                (e.time.as_deref(), e.unix_ms),
                (Some(T), Some(MS)),
                "{line}"
            );
        }
    }
    let all: BTreeSet<String> = kinds().iter().map(|k| k.name.to_owned()).collect();
    assert_eq!(kinds_seen, all, "an older line of every kind");
}

/// What the type writes is what the writers' `json!` wrote (same keys, same order, `null`
/// where they wrote `null`), but for the job id, a string from now on.
#[test]
fn the_lines_written_are_those_written_before() {
    for line in [
        r#"{"attempt":0,"event":"attempt_started","master_port":41234,"requeue":0,"restarts":0,"resume_from":null,"time":"T","unix_ms":1}"#,
        r#"{"action":"stop","attempt":0,"cause":"time_limit","event":"signal","node":null,"signal":"SIGUSR1","time":"T","unix_ms":1}"#,
        r#"{"action":"forward","attempt":0,"cause":null,"event":"signal","node":null,"signal":"SIGUSR2","time":"T","unix_ms":1}"#,
        r#"{"by":"herd cancel","event":"cancelled","job_id":"4242","user":null,"why":"experiment train","time":"T","unix_ms":1}"#,
        r#"{"event":"ended","exit_code":1,"job_id":"4242","reason":"NonZeroExitCode","state":"FAILED","time":"T","unix_ms":1}"#,
        r#"{"attempt":3,"event":"restarts_stopped","left":2,"max_restarts":5,"restarts":3,"step":null,"time":"T","unix_ms":1}"#,
        r#"{"attempt":0,"during":"stop","event":"worker_exit","how":"exited 0","rank":0,"time":"T","unix_ms":1}"#,
        r#"{"event":"queued","job_id":"4242","submission":1,"time":"T","unix_ms":1}"#,
    ] {
        let mut want: Vec<(String, Value)> =
            match serde_json::from_str::<Value>(line).expect("JSON") {
                Value::Object(m) => m.into_iter().collect(),
                _ => panic!("{line}"),
            };
        want.sort_by(|a, b| a.0.cmp(&b.0));
        let written = Entry::parse(line).line().expect("a line");
        let want = serde_json::to_string(&want.into_iter().collect::<serde_json::Map<_, _>>())
            .expect("JSON");
        assert_eq!(written, want);
    }
    let started =
        Entry::parse(r#"{"event":"started","host":"n0","job_id":4242,"nodes":[],"requeue":0}"#);
    assert_eq!(
        started.line().expect("a line"),
        r#"{"event":"started","host":"n0","job_id":"4242","nodes":[],"requeue":0}"#,
        "a plain job's id is written as a string now"
    );
}

/// A line of an unknown kind, with a field of another type, or not JSON: an `Other`, with
/// the envelope when it has one, written back as read.
#[test]
fn lines_that_are_no_known_event_are_kept_as_other() {
    for (line, kind, ms) in [
        (
            r#"{"event":"tick","unix_ms":5,"thread":1}"#,
            Some("tick"),
            Some(5),
        ),
        (
            r#"{"event":"teardown","attempt":"zero","unix_ms":6}"#,
            Some("teardown"),
            Some(6),
        ),
        (
            r#"{"event":"started","job_id":[1],"unix_ms":7}"#,
            Some("started"),
            Some(7),
        ),
        (r#"{"no":"event"}"#, None, None),
        ("not json", None, None),
        (r#"{"event":"finished","ok":tr"#, None, None),
        ("[1, 2]", None, None),
    ] {
        let e = Entry::parse(line);
        let Event::Other(o) = &e.event else {
            panic!("{line}: read as {:?}", e.event);
        };
        assert_eq!(o.kind.as_deref(), kind, "{line}");
        assert_eq!(e.event.kind(), kind.unwrap_or(""), "{line}");
        assert!(!o.error.is_empty(), "{line}");
        assert_eq!(e.unix_ms, ms, "{line}");
        assert_eq!(e.event.attempt(), None);
        assert_eq!(e.line().expect("as read"), line);
    }
}

#[test]
fn job_ids_read_from_numbers_and_strings_and_are_written_as_strings() {
    let id: JobRef = serde_json::from_str("41").expect("a number");
    assert_eq!(id, JobRef::from("41"));
    let id: JobRef = serde_json::from_str("\"40_2\"").expect("a string");
    assert_eq!(id.as_str(), "40_2");
    assert_eq!(
        serde_json::to_string(&JobRef::from(41_u64)).expect("JSON"),
        "\"41\""
    );
    assert!(serde_json::from_str::<JobRef>("true").is_err());
    assert_eq!(
        Event::from(Started {
            job_id: Some("7".into()),
            ..Started::default()
        })
        .job_id()
        .map(JobRef::as_str),
        Some("7")
    );
}

#[test]
fn events_are_appended_whole_and_read_back_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    assert!(read(dir.path()).expect("no file yet").is_empty());
    let path = "x".repeat(300);
    std::thread::scope(|s| {
        for t in 0..4u32 {
            let (dir, path) = (dir.path(), &path);
            s.spawn(move || {
                for i in 0..50 {
                    let e = Checkpoint {
                        attempt: t * 100 + i,
                        path: path.clone(),
                    };
                    append(dir, e).expect("append");
                }
            });
        }
    });
    let events = read(dir.path()).expect("reads");
    assert_eq!(events.len(), 200, "every line whole");
    for t in 0..4 {
        let mine: Vec<u32> = events
            .iter()
            .filter_map(|e| e.event.attempt())
            .filter(|a| a / 100 == t)
            .map(|a| a % 100)
            .collect();
        assert_eq!(mine, (0..50).collect::<Vec<_>>(), "thread {t} in order");
    }
    assert!(events.iter().all(|e| e.event.kind() == "checkpoint"
        && e.unix_ms.is_some()
        && e.time.as_deref().is_some_and(|t| t.ends_with('Z'))));
    // A line that is no event stops no reader: it is read as one and passed over.
    std::fs::write(
        ExperimentDir::new(dir.path()).timeline(),
        b"{\"event\":\"teardown\",\"attempt\":1}\nnot json\n\n\xff\xfe\n{\"event\":\"restart\",\"attempt\":2}\n",
    )
    .expect("write");
    let events = read(dir.path()).expect("reads past bad lines");
    let kinds: Vec<&str> = events.iter().map(|e| e.event.kind()).collect();
    assert_eq!(kinds, ["teardown", "", "", "restart"]);
}

#[test]
fn formats_utc_times() {
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(rfc3339(1_796_060_412_123), "2026-11-30T17:40:12.123Z");
    assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
}

#[test]
fn parses_rfc3339_back() {
    for ms in [0, 1_796_060_412_123, 951_782_400_000, 1_709_251_199_999] {
        assert_eq!(parse_rfc3339(&rfc3339(ms)), Some(ms), "{}", rfc3339(ms));
    }
    assert_eq!(
        parse_rfc3339("2026-11-30T17:40:12Z"),
        Some(1_796_060_412_000)
    );
    assert_eq!(
        parse_rfc3339("2026-11-30T18:40:12.5+01:00"),
        Some(1_796_060_412_500)
    );
    for bad in [
        "2026-11-30",
        "2026-11-30T17:40:12",
        "2026-13-30T17:40:12Z",
        "2026-11-30T17:40:12.Z",
        "2026-11-30T17:40:12Zx",
        "yesterday",
    ] {
        assert_eq!(parse_rfc3339(bad), None, "{bad}");
    }
}
