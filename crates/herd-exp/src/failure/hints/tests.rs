//! Each entry against real output. Where each fixture comes from:
//!
//! - `abort-at-exit.torchrun.err`: torch 2.15 (CPU), `torchrun --nproc-per-node 2` of a
//!   script that inits gloo, all-reduces once and exits without `destroy_process_group()`;
//!   1 run of 12 aborted like this (rank 0, SIGABRT). The rank's own line is
//!   `terminate called without an active exception`; the rest is torchrun's.
//! - `abort-at-exit.nccl-warning.err`, `abort-at-exit.nccl-2.4.err`: torch's NCCL
//!   warnings at exit without `destroy_process_group()` (torch ≥ 2.5 and 2.4), as users
//!   pasted them (pytorch/examples#1387, sehoffmann/dmlcloud#61); the text is in
//!   libtorch_cuda.so of torch 2.15.
//! - `abort-at-exit.gloo-enforce.err`: gloo's abort at shutdown (pytorch/pytorch#2530).
//! - `port-in-use.err`, `master-unreachable.err`, `gloo-timeout.err`,
//!   `module-not-found.err`, `disk-full.err`, `disk-full.torch-save.err`: torch 2.15 here:
//!   `init_process_group` on a held port, as rank 1 with no master, an all-reduce one rank
//!   never joins (timeout 5 s), an import of a missing module, and a write and a
//!   `torch.save` to `/dev/full`.
//! - `cuda-oom.err`, `invalid-device-ordinal.err`, `nccl-watchdog.err`: CUDA and NCCL
//!   texts as users pasted them (pytorch/pytorch#16417, hpcaitech/Open-Sora#40,
//!   XPixelGroup/BasicSR#737); no GPU here.

use super::*;
use crate::failure::{Exit, FailureReport};

fn lines(text: &str) -> Vec<String> {
    text.lines().map(str::to_owned).collect()
}

fn name(exit: Exit, stderr: &str) -> Option<&'static str> {
    find(exit.aborted(), None, &lines(stderr)).map(|h| h.name)
}

fn code(c: i32) -> Exit {
    Exit::Code(c)
}

fn abort() -> Exit {
    Exit::Signal("SIGABRT".into())
}

#[test]
fn each_entry_knows_its_real_text() {
    let cases: &[(&str, Exit, &str)] = &[
        (
            include_str!("fixtures/cuda-oom.err"),
            code(1),
            "cuda-out-of-memory",
        ),
        (
            include_str!("fixtures/invalid-device-ordinal.err"),
            code(1),
            "invalid-device-ordinal",
        ),
        (
            include_str!("fixtures/nccl-watchdog.err"),
            abort(),
            "collective-timeout",
        ),
        (
            include_str!("fixtures/gloo-timeout.err"),
            code(1),
            "collective-timeout",
        ),
        (
            include_str!("fixtures/port-in-use.err"),
            code(1),
            "port-in-use",
        ),
        (
            include_str!("fixtures/master-unreachable.err"),
            code(1),
            "master-unreachable",
        ),
        (
            include_str!("fixtures/module-not-found.err"),
            code(1),
            "module-not-found",
        ),
        (include_str!("fixtures/disk-full.err"), code(1), "disk-full"),
        (
            include_str!("fixtures/disk-full.torch-save.err"),
            code(1),
            "disk-full",
        ),
        (
            include_str!("fixtures/abort-at-exit.torchrun.err"),
            abort(),
            "process-group-not-destroyed",
        ),
        (
            "terminate called without an active exception",
            abort(),
            "process-group-not-destroyed",
        ),
        (
            include_str!("fixtures/abort-at-exit.nccl-warning.err"),
            abort(),
            "process-group-not-destroyed",
        ),
        (
            include_str!("fixtures/abort-at-exit.nccl-2.4.err"),
            code(134),
            "process-group-not-destroyed",
        ),
        (
            include_str!("fixtures/abort-at-exit.gloo-enforce.err"),
            abort(),
            "process-group-not-destroyed",
        ),
    ];
    for (text, exit, want) in cases {
        assert_eq!(name(exit.clone(), text), Some(*want), "{text}");
    }
    // Every entry has a fixture above.
    for h in HINTS {
        assert!(
            cases.iter().any(|(_, _, n)| *n == h.name),
            "{} has no real text in the test",
            h.name
        );
    }
}

#[test]
fn an_unknown_failure_gets_no_guess() {
    let text = "Traceback (most recent call last):\n  File \"train.py\", line 6, in <module>\nValueError: bad shard 7";
    assert_eq!(name(code(1), text), None);
    assert_eq!(name(Exit::Signal("SIGSEGV".into()), ""), None);
    assert_eq!(name(abort(), ""), None);
}

#[test]
fn the_first_match_wins() {
    // NCCL's watchdog aborts the process and torch warns about the process group on the
    // way out: the timeout is the cause.
    let both = format!(
        "{}{}",
        include_str!("fixtures/nccl-watchdog.err"),
        include_str!("fixtures/abort-at-exit.nccl-warning.err")
    );
    assert_eq!(name(abort(), &both), Some("collective-timeout"));
    // An out-of-memory error whose traceback also passes a full disk's text.
    let oom_then_disk = format!(
        "{}OSError: [Errno 28] No space left on device\n",
        include_str!("fixtures/cuda-oom.err")
    );
    assert_eq!(name(code(1), &oom_then_disk), Some("cuda-out-of-memory"));
}

#[test]
fn the_abort_at_exit_needs_an_abort_and_no_exception() {
    let warning = include_str!("fixtures/abort-at-exit.nccl-warning.err");
    // torch warns at any exit without destroy_process_group(), after an exception too:
    // then the exception is the cause, and it is not one herd knows.
    assert_eq!(name(code(1), warning), None);
    let error = WorkerError::parse(
        r#"{"message": {"message": "ValueError: bad shard 7", "extraInfo": {"py_callstack": "Traceback (most recent call last):\nValueError: bad shard 7\n"}}}"#,
        std::path::Path::new("/exp/rank-0.error.json"),
    );
    assert!(error.is_some());
    assert_eq!(find(true, error.as_ref(), &lines(warning)), None);
}

#[test]
fn the_error_file_is_read_too() {
    let error = WorkerError::parse(
        r#"{"message": {"message": "ModuleNotFoundError: No module named 'timm'", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"/exp/code/train.py\", line 3, in main\n    import timm\nModuleNotFoundError: No module named 'timm'\n"}}}"#,
        std::path::Path::new("/exp/rank-0.error.json"),
    );
    assert_eq!(
        find(false, error.as_ref(), &[]).map(|h| h.name),
        Some("module-not-found")
    );
}

#[test]
fn the_report_says_the_signal_and_the_hint() {
    let r = FailureReport::worker(
        0,
        (0, 0, 0),
        "gpu-a01",
        abort(),
        None,
        vec!["terminate called without an active exception".into()],
    );
    let text = r.human();
    let got: Vec<&str> = text.lines().collect();
    assert!(
        got[0].ends_with(&format!("killed by SIGABRT (aborted) at {}", r.time)),
        "{text}"
    );
    assert!(
        got[1].starts_with(
            "herd: likely cause: the worker aborted at exit while its process group's threads"
        ),
        "{text}"
    );
    assert!(got[1].contains(" — fix: end the script with"), "{text}");
    assert_eq!(got.len(), 4, "{text}");
    let json = serde_json::to_value(&r).unwrap_or_default();
    assert_eq!(json["hint"], serde_json::json!(r.hint));
    // A report without a hint has no `hint` key; one written before hints reads back.
    let plain = FailureReport::worker(0, (0, 0, 0), "a", code(3), None, vec![]);
    assert_eq!(plain.hint, None);
    let json = serde_json::to_value(&plain).unwrap_or_default();
    assert!(json.get("hint").is_none(), "{json}");
    let back: FailureReport = serde_json::from_value(json).expect("reads back");
    assert_eq!(back, plain);
}

/// The table docs/launch.md shows, made from [`HINTS`].
fn table() -> String {
    let mut t =
        String::from("| the failing rank's output has | likely cause | fix |\n|---|---|---|\n");
    for h in HINTS {
        let texts: Vec<String> = h.texts.iter().map(|s| format!("`{s}`")).collect();
        let mut texts = texts.join(", ");
        if h.aborted_only {
            texts.push_str(" (only when the worker was aborted, SIGABRT, and wrote no error file)");
        }
        t.push_str(&format!(
            "| {texts} | {} | {} |\n",
            h.cause,
            h.fix.replace('|', "\\|")
        ));
    }
    t
}

/// docs/launch.md's table of likely causes is [`HINTS`], in order. `HERD_UPDATE_DOCS=1`
/// rewrites it.
#[test]
fn the_docs_list_every_hint() {
    let want = table();
    let Some(shown) = herd_testbed::docs::table_in("launch.md", "failure hints", &want) else {
        return;
    };
    assert!(
        shown == want,
        "docs/launch.md: the table of likely causes differs from crates/herd-exp/src/failure/hints.rs; \
         rewrite it with `HERD_UPDATE_DOCS=1 cargo nextest run -p herd-exp docs_list_every_hint`, or paste:\n{want}"
    );
}
