use super::*;

/// One timeline event at `s` seconds after 1000 s.
fn ev(s: f64, event: &str, fields: Value) -> Entry {
    let mut m = Map::new();
    m.insert("unix_ms".into(), json!(1_000_000 + (s * 1000.0) as u64));
    m.insert("event".into(), json!(event));
    if let Value::Object(f) = fields {
        m.extend(f);
    }
    let e = Entry::parse(&Value::Object(m).to_string());
    assert!(!matches!(e.event, Event::Other(_)), "{e:?}");
    e
}

fn at(s: f64) -> u64 {
    1_000_000 + (s * 1000.0) as u64
}

/// Readings of `steps` (inclusive), one a second from `t0`.
fn readings(t0: f64, steps: std::ops::RangeInclusive<u64>) -> Steps {
    steps
        .enumerate()
        .map(|(i, s)| (at(t0 + i as f64), s))
        .collect()
}

/// A time limit (attempt 0, checkpointed on the way out), a frozen node (attempt 1, which
/// first redoes 5 steps since the checkpoint was older), and the end (attempt 2).
fn story() -> (Vec<Entry>, BTreeMap<u32, Steps>) {
    let events = vec![
        ev(0.0, "started", json!({"job_id": 7, "requeue": 0})),
        ev(-1.0, "queued", json!({"job_id": "7", "submission": 1})),
        ev(0.5, "rendezvous", json!({})),
        ev(1.0, "attempt_started", json!({"attempt": 0})),
        // steps 1..=20 at 4..23 s
        ev(
            23.5,
            "warning",
            json!({"attempt": 0, "cause": "time_limit"}),
        ),
        ev(26.0, "teardown", json!({"attempt": 0})),
        ev(
            26.5,
            "requeue",
            json!({"attempt": 0, "cause": "time_limit"}),
        ),
        ev(36.0, "started", json!({"job_id": 7, "requeue": 1})),
        ev(37.0, "attempt_started", json!({"attempt": 1})),
        // steps 16..=30 at 40..54 s; frozen at 54.5, decided at 65
        ev(
            65.0,
            "failed",
            json!({"attempt": 1, "kind": "node_failure", "cause": "lost node 1 (b): no word"}),
        ),
        ev(67.0, "teardown", json!({"attempt": 1})),
        ev(
            67.2,
            "requeue",
            json!({"attempt": 1, "cause": "node_failure"}),
        ),
        ev(80.0, "started", json!({"job_id": 7, "requeue": 2})),
        ev(81.0, "attempt_started", json!({"attempt": 2})),
        // steps 21..=40 at 85..104 s (resumed from step 20: 10 steps again)
        ev(106.0, "finished", json!({"attempt": 2, "ok": true})),
    ];
    let mut steps = BTreeMap::new();
    steps.insert(0, readings(4.0, 1..=20));
    steps.insert(1, readings(40.0, 16..=30));
    steps.insert(2, readings(85.0, 21..=40));
    (events, steps)
}

fn secs_of(a: &Accounting, p: Part) -> f64 {
    a.parts.get(p) as f64 / 1000.0
}

#[test]
fn parts_add_up_to_the_wall_time_and_each_has_its_span() {
    let (events, steps) = story();
    let a = account(&events, &steps, at(500.0));
    assert!(!a.running);
    assert_eq!(a.segments, vec![(at(0.0), at(106.0))]);
    assert_eq!(a.parts.total(), a.wall_ms(), "{:?}", a.parts);
    // Attempt 0: start 0 → 4, training 4 → 23, then 23 → 23.5 other (a step under way),
    // stop 23.5 → 26, other 26 → 26.5, queue 26.5 → 36.
    let a0 = &a.attempts[0];
    assert_eq!((a0.from_ms, a0.to_ms), (at(0.0), at(36.0)));
    assert_eq!(a0.parts.get(Part::Start), 4_000);
    assert_eq!(a0.parts.get(Part::Training), 19_000);
    assert_eq!(a0.parts.get(Part::Stop), 2_500);
    assert_eq!(a0.parts.get(Part::Queue), 9_500);
    assert_eq!(a0.ended, "requeue: time limit");
    // Attempt 1: start 36 → 40; steps 16..=20 again: 40 → 44 rework (the gaps ending at
    // steps 17..20), 44 → 54 training; detection 54 → 65; stop 65 → 67; queue 67.2 → 80.
    let a1 = &a.attempts[1];
    assert_eq!(a1.parts.get(Part::Start), 4_000);
    assert_eq!(a1.parts.get(Part::Rework), 4_000);
    assert_eq!(a1.parts.get(Part::Training), 10_000);
    assert_eq!(a1.parts.get(Part::Detection), 11_000);
    assert_eq!(a1.parts.get(Part::Stop), 2_000);
    assert_eq!(a1.parts.get(Part::Queue), 12_800);
    assert_eq!(a1.rework_steps, 5, "steps 16..=20 twice");
    assert!(
        a1.ended.starts_with("requeue: node failure"),
        "{}",
        a1.ended
    );
    // Attempt 2: steps 21..=30 again (10), 31..=40 new.
    let a2 = &a.attempts[2];
    assert_eq!(a2.rework_steps, 10);
    assert_eq!(a2.parts.get(Part::Rework), 9_000);
    assert_eq!(a2.parts.get(Part::Training), 10_000);
    assert_eq!(a2.ended, "finished");
    assert_eq!(a.rework_steps, 15);
    assert_eq!(secs_of(&a, Part::Training), 39.0);
    let g = a.goodput().expect("goodput");
    assert!((g - 39.0 / 106.0).abs() < 1e-9, "{g}");
    let alloc = a.goodput_allocated().expect("allocated");
    assert!((alloc - 39.0 / (106.0 - 22.3)).abs() < 1e-9, "{alloc}");
    // Each attempt's spans follow one another from its start to its end.
    for t in &a.attempts {
        let mut at_ms = t.from_ms;
        for s in &t.spans {
            assert_eq!(s.from_ms, at_ms, "{:?}", t.spans);
            assert!(s.to_ms > s.from_ms);
            at_ms = s.to_ms;
        }
        assert_eq!(at_ms, t.to_ms);
    }
    assert!(
        a.summary().starts_with("goodput 36.8 % of 1:46 ("),
        "{}",
        a.summary()
    );
    assert!(
        a.split_line().contains("rework 13.0 s (15 steps)"),
        "{}",
        a.split_line()
    );
}

#[test]
fn a_hang_is_detected_from_the_silent_ranks_last_sign_of_life() {
    let events = vec![
        ev(0.0, "started", json!({"job_id": "9"})),
        ev(1.0, "attempt_started", json!({"attempt": 0})),
        ev(
            40.0,
            "hang",
            json!({"attempt": 0, "rank": 1, "silent_s": 30.0}),
        ),
        ev(42.0, "teardown", json!({"attempt": 0})),
        ev(42.5, "restart", json!({"attempt": 1})),
        ev(43.0, "attempt_started", json!({"attempt": 1})),
        ev(60.0, "finished", json!({"attempt": 1, "ok": true})),
    ];
    let mut steps = BTreeMap::new();
    steps.insert(0, readings(2.0, 1..=7)); // last at 8 s; the silent rank's at 10 s
    steps.insert(1, readings(45.0, 1..=14));
    let a = account(&events, &steps, at(100.0));
    let a0 = &a.attempts[0];
    assert_eq!(a0.parts.get(Part::Detection), 30_000, "{:?}", a0.spans);
    assert_eq!(a0.parts.get(Part::Stop), 2_000);
    assert_eq!(
        a0.parts.get(Part::Other),
        2_000,
        "8 → 10 s: a step cut short"
    );
    assert_eq!(
        a0.to_ms,
        at(42.0),
        "a restart begins where the last attempt ended"
    );
    assert_eq!(a0.ended, "restart");
    let a1 = &a.attempts[1];
    assert_eq!(a1.parts.get(Part::Start), 3_000, "42 → 45 s");
    assert_eq!(a1.rework_steps, 7, "no checkpoint: every step again");
    assert_eq!(a.parts.total(), a.wall_ms());
    // The fault: from the silent rank's last sign (10 s) to training again.
    assert_eq!(a.faults.len(), 1, "{:?}", a.faults);
    let f = &a.faults[0];
    assert_eq!((f.kind.as_str(), f.then.as_str()), ("hang", "restart"));
    assert_eq!(f.at_ms, at(10.0));
    assert_eq!(
        phases(f),
        [30.0, 0.0, 2.0, 1.0, 2.0, 6.0],
        "steps 1 → 7 again from the first reading"
    );
    assert_eq!(f.redone_steps, 7);
}

/// A fault's phases in seconds, `-1` for one that did not happen.
fn phases(f: &Fault) -> [f64; 6] {
    Phase::ALL.map(|p| f.phase_ms(p).map_or(-1.0, |ms| ms as f64 / 1000.0))
}

#[test]
fn each_faults_cost_is_split_into_phases_that_add_up_to_it() {
    let (events, steps) = story();
    let a = account(&events, &steps, at(200.0));
    assert_eq!(a.faults.len(), 2, "{:?}", a.faults);
    // The time limit: warned at 23.5 s, workers gone at 26, attempt 1 at 37, its first
    // reading at 40 (step 16), past step 20 at 44.
    let tl = &a.faults[0];
    assert_eq!(
        (tl.attempt, tl.kind.as_str(), tl.then.as_str()),
        (0, "time limit", "requeue")
    );
    assert_eq!(tl.at_ms, at(23.5));
    assert_eq!(phases(tl), [0.0, 0.0, 2.5, 11.0, 3.0, 4.0]);
    assert_eq!(tl.redone_steps, 5);
    assert_eq!(tl.cost_ms(), Some(20_500));
    // The frozen node: its last reading at 54 s (step 30), the verdict at 65, gone at 67,
    // attempt 2 at 81, its first reading at 85 (step 21), past step 30 at 94.
    let node = &a.faults[1];
    assert_eq!(
        (node.attempt, node.kind.as_str(), node.then.as_str()),
        (1, "node failure", "requeue")
    );
    assert_eq!(node.at_ms, at(54.0));
    assert_eq!(phases(node), [11.0, 0.0, 2.0, 14.0, 4.0, 9.0]);
    assert_eq!(node.redone_steps, 10);
    for f in &a.faults {
        let sum: u64 = Phase::ALL.iter().filter_map(|p| f.phase_ms(*p)).sum();
        assert_eq!(Some(sum), f.cost_ms(), "{f:?}");
    }
    assert_eq!(
        node.line(),
        "attempt 1, node failure → requeue: 40.0 s = detect 11.0 s · decide 0.0 s · teardown 2.0 s · requeue 14.0 s · first step 4.0 s · redone 9.0 s (10 steps)"
    );
    let json = a.json();
    assert_eq!(json["faults"][1]["cost_s"], json!(40.0));
    assert_eq!(json["faults"][1]["phases"]["relaunch"], json!(14.0));
    assert_eq!(json["faults"][0]["kind"], json!("time limit"));
}

#[test]
fn a_crash_is_noticed_at_the_workers_exit_and_a_failure_that_ends_the_job_has_no_cost_yet() {
    let events = vec![
        ev(0.0, "started", json!({"job_id": "9"})),
        ev(1.0, "attempt_started", json!({"attempt": 0})),
        ev(
            12.2,
            "worker_exit",
            json!({"attempt": 0, "rank": 2, "how": "exited with code 3"}),
        ),
        ev(
            12.3,
            "failed",
            json!({"attempt": 0, "kind": "worker_failure", "cause": "rank 2 exited with code 3"}),
        ),
        ev(12.5, "teardown", json!({"attempt": 0})),
        ev(12.6, "restart", json!({"attempt": 1})),
        ev(12.6, "attempt_started", json!({"attempt": 1})),
        ev(
            20.0,
            "worker_exit",
            json!({"attempt": 1, "rank": 2, "how": "exited with code 3"}),
        ),
        ev(
            20.0,
            "failed",
            json!({"attempt": 1, "kind": "worker_failure", "cause": "rank 2 exited with code 3"}),
        ),
        ev(20.4, "teardown", json!({"attempt": 1})),
        ev(
            20.4,
            "finished",
            json!({"attempt": 1, "ok": false, "cause": "worker_failure"}),
        ),
    ];
    let mut steps = BTreeMap::new();
    steps.insert(0, readings(3.0, 1..=9));
    steps.insert(1, readings(15.0, 1..=5));
    let a = account(&events, &steps, at(100.0));
    assert_eq!(a.faults.len(), 2, "{:?}", a.faults);
    let crash = &a.faults[0];
    assert_eq!(crash.at_ms, at(12.2), "the worker's exit");
    assert_eq!(
        phases(crash),
        [0.0, 0.1, 0.2, 0.1, 2.4, -1.0],
        "no checkpoint, and the next attempt failed before passing step 9: never training again"
    );
    assert_eq!(crash.cost_ms(), None);
    assert!(
        crash.line().contains(": not training again = detect 0.0 s"),
        "{}",
        crash.line()
    );
    let last = &a.faults[1];
    assert_eq!(last.then, "failed");
    assert_eq!(last.cost_ms(), None);
    assert_eq!(phases(last), [0.0, 0.0, 0.4, -1.0, -1.0, -1.0]);
    assert!(
        last.line().contains(": the job ended = detect 0.0 s"),
        "{}",
        last.line()
    );
}

#[test]
fn without_step_readings_the_workers_time_is_running_and_goodput_unknown() {
    let events = vec![
        ev(0.0, "started", json!({"job_id": "9"})),
        ev(1.0, "attempt_started", json!({"attempt": 0})),
        ev(30.0, "finished", json!({"attempt": 0, "ok": true})),
    ];
    let a = account(&events, &BTreeMap::new(), at(100.0));
    assert!(!a.split);
    assert_eq!(a.goodput(), None);
    assert_eq!(a.parts.get(Part::Running), 30_000);
    assert!(
        a.summary()
            .contains("no step readings to split training, rework and start"),
        "{}",
        a.summary()
    );
}

#[test]
fn a_running_job_counts_to_now_and_submissions_apart() {
    let mut events = vec![
        ev(-5.0, "queued", json!({"job_id": "1", "submission": 1})),
        ev(0.0, "started", json!({"job_id": 1})),
        ev(1.0, "attempt_started", json!({"attempt": 0})),
        ev(
            20.0,
            "failed",
            json!({"attempt": 0, "kind": "worker_failure", "cause": "rank 0 exited 1"}),
        ),
        ev(21.0, "teardown", json!({"attempt": 0})),
        ev(
            21.5,
            "finished",
            json!({"attempt": 0, "ok": false, "cause": "worker_failure"}),
        ),
        ev(500.0, "queued", json!({"job_id": "2", "submission": 2})),
        ev(600.0, "started", json!({"job_id": 2})),
        ev(601.0, "attempt_started", json!({"attempt": 1})),
    ];
    let mut steps = BTreeMap::new();
    steps.insert(0, readings(3.0, 1..=10));
    steps.insert(1, readings(605.0, 6..=12));
    let a = account(&events, &steps, at(620.0));
    assert!(a.running);
    assert_eq!(
        a.segments,
        vec![(at(0.0), at(21.5)), (at(600.0), at(620.0))]
    );
    assert_eq!(
        a.wall_ms(),
        41_500,
        "the time between submissions is no part"
    );
    assert_eq!(a.parts.total(), a.wall_ms());
    assert_eq!(a.attempts[0].ended, "failed: rank 0 exited 1");
    assert_eq!(a.attempts[1].ended, "running");
    assert_eq!(a.attempts[1].rework_steps, 5);
    assert!(a.summary().contains(" so far "), "{}", a.summary());
    // The scheduler's end, recorded by herd status, ends the count.
    events.push(ev(
        700.0,
        "ended",
        json!({"job_id": "2", "state": "FAILED"}),
    ));
    let a = account(&events, &steps, at(900.0));
    assert!(!a.running);
    assert_eq!(a.segments[1], (at(600.0), at(601.0)));
}

#[test]
fn durations_read_as_people_say_them() {
    assert_eq!(duration(4_200), "4.2 s");
    assert_eq!(duration(232_000), "3:52");
    assert_eq!(duration(3_723_000), "1:02:03");
    assert_eq!(percent(0.775), "77.5 %");
}

#[test]
fn the_checkpoint_advice_weighs_the_median_save_against_the_faults_that_cost_work() {
    use super::advice::{advise, Save};
    let (events, steps) = story();
    let a = account(&events, &steps, at(200.0));
    // Saves every 5 s in attempts 0 and 1 taking 0.2, 0.3 or 0.4 s; one in attempt 2.
    let mut saves = Vec::new();
    for (attempt, from, n) in [(0, 5.0, 4), (1, 41.0, 3), (2, 90.0, 1)] {
        for i in 0..n {
            saves.push(Save {
                attempt,
                started_ms: at(from + 5.0 * i as f64),
                seconds: [0.2, 0.3, 0.4][i % 3],
            });
        }
    }
    let adv = advise(&saves, &a.faults, a.allocated_ms()).expect("advice");
    assert_eq!(adv.saves, 8);
    // 0.2 s four times, 0.3 and 0.4 s twice each: the median is 0.25 s.
    assert!((adv.save_s - 0.25).abs() < 1e-9, "{adv:?}");
    assert_eq!(adv.every_s, Some(5.0), "gaps inside one attempt only");
    // The time limit cost no work (herd warned, the job saved on its way out); the
    // frozen node did.
    assert_eq!(adv.lossy_faults, 1);
    let allocated = a.allocated_ms() as f64 / 1000.0;
    assert_eq!(adv.mtbf_s, Some(allocated));
    let best = (2.0 * 0.25 * allocated).sqrt();
    assert!((adv.best_every_s.expect("best") - best).abs() < 1e-9);
    // Young's interval loses the least: less than 5 s, and less than either side of it.
    let (now, then) = (
        adv.waste_now().expect("now"),
        adv.waste_best().expect("best"),
    );
    assert!(then < now, "{then} < {now}");
    for off in [0.8, 1.25] {
        assert!(adv.waste(best * off).expect("w") > then);
    }
    let line = adv.line();
    assert!(
        line.starts_with(
            "checkpoints: 8 saves, one every 5.0 s, 0.25 s each (medians); 1 fault cost work in "
        ) && line.contains(&format!(
            "best one every {} (Young: √(2 × 0.25 s × ",
            duration((best * 1000.0).round() as u64)
        )) && line.contains(" of the time to saves and redone steps instead of "),
        "{line}"
    );
    let mut with = a.clone();
    with.advice = Some(adv);
    let json = with.json();
    assert_eq!(json["checkpoint_advice"]["saves"], json!(8));
    assert_eq!(json["checkpoint_advice"]["lossy_faults"], json!(1));
    // No fault that cost work: the numbers, and nothing to weigh them against.
    let calm = vec![
        ev(0.0, "started", json!({"job_id": "9"})),
        ev(1.0, "attempt_started", json!({"attempt": 0})),
        ev(30.0, "finished", json!({"attempt": 0, "ok": true})),
    ];
    let quiet = account(&calm, &BTreeMap::new(), at(100.0));
    let adv = advise(&saves[..2], &quiet.faults, quiet.allocated_ms()).expect("advice");
    assert_eq!((adv.mtbf_s, adv.best_every_s), (None, None));
    assert!(
        adv.line()
            .ends_with("; no fault has cost work yet: nothing to weigh the saves against"),
        "{}",
        adv.line()
    );
    assert!(
        advise(&[], &quiet.faults, quiet.allocated_ms()).is_none(),
        "no save: no advice"
    );
}
