use super::*;

/// `nvidia-smi --query-gpu=<QUERY> --format=csv,noheader,nounits` as the driver prints it:
/// a busy H100 at its power cap, an idle one, and a consumer GPU without ECC.
const H100_BUSY: &str = "0, GPU-6c1e3f2a-5b7d-4e08-9a41-0c2f8d1b7e55, NVIDIA H100 80GB HBM3, 97, 61234, 81559, 698.12, 700.00, 63, 1755, 0x0000000000000004, 0, [N/A], 00000000:1B:00.0";
const H100_IDLE: &str = "1, GPU-0a9b8c7d-1e2f-3a4b-5c6d-7e8f9a0b1c2d, NVIDIA H100 80GB HBM3, 0, 4, 81559, 71.40, 700.00, 31, 345, 0x0000000000000001, 0, [N/A], 00000000:43:00.0";
const CONSUMER: &str = "0, GPU-11111111-2222-3333-4444-555555555555, NVIDIA GeForce RTX 4090, 35, 2048, 24564, 120.50, 450.00, 48, 2520, 0x0000000000000000, [N/A], [N/A], 00000000:01:00.0";

#[test]
fn query_names_every_field_parse_line_reads() {
    assert!(query_arg().starts_with("index,uuid,name,utilization.gpu,"));
    assert_eq!(query_arg().split(',').count(), QUERY.len());
}

#[test]
fn a_busy_gpu_at_its_power_cap_is_read_field_by_field() {
    let s = parse_line(H100_BUSY, 1_700_000_000_000).expect("a sample");
    assert_eq!(s.t, 1_700_000_000_000);
    assert_eq!(s.gpu, 0);
    assert_eq!(s.uuid, "GPU-6c1e3f2a-5b7d-4e08-9a41-0c2f8d1b7e55");
    assert_eq!(s.name.as_deref(), Some("NVIDIA H100 80GB HBM3"));
    assert_eq!(s.util, Some(97.0));
    assert_eq!((s.mem_used, s.mem_total), (Some(61234.0), Some(81559.0)));
    assert_eq!((s.power, s.power_limit), (Some(698.12), Some(700.0)));
    assert_eq!((s.temp, s.sm_clock), (Some(63.0), Some(1755.0)));
    assert_eq!(s.reasons, vec!["sw_power_cap"]);
    assert_eq!(s.throttled_by(), vec!["sw_power_cap"]);
    assert_eq!(s.ecc_uncorrected, Some(0));
    assert_eq!(s.retired_pending, None, "[N/A] is no value");
    assert_eq!(s.pci.as_deref(), Some("00000000:1B:00.0"));
}

#[test]
fn an_idle_gpu_is_not_throttled_and_missing_ecc_is_none() {
    let idle = parse_line(H100_IDLE, 1).expect("a sample");
    assert_eq!(idle.reasons, vec!["gpu_idle"]);
    assert!(
        idle.throttled_by().is_empty(),
        "idle clocks are no throttling"
    );
    let consumer = parse_line(CONSUMER, 1).expect("a sample");
    assert!(consumer.reasons.is_empty());
    assert_eq!(consumer.ecc_uncorrected, None);
}

#[test]
fn a_visible_devices_entry_names_a_gpu_by_index_or_uuid_as_cuda_reads_it() {
    let (index, uuid) = (Some(3), Some("GPU-5d5b2b4a-0000-1111-2222-333344445555"));
    assert_eq!(names_gpu("3", index, uuid), Some(true));
    assert_eq!(names_gpu("03", index, uuid), Some(true));
    assert_eq!(names_gpu("2", index, uuid), Some(false));
    assert_eq!(names_gpu("GPU-5d5b2b4a", index, uuid), Some(true));
    assert_eq!(names_gpu("GPU-ffff", index, uuid), Some(false));
    assert_eq!(
        names_gpu("MIG-c738", None, Some("MIG-c7384736")),
        Some(true)
    );
    assert_eq!(names_gpu("0", None, Some("MIG-c7384736")), Some(false));
    assert_eq!(names_gpu("nvidia0", index, uuid), None);
}

#[test]
fn every_reason_bit_has_its_name() {
    let all: u64 = REASONS.iter().map(|r| r.0).sum();
    assert_eq!(reasons(all).len(), REASONS.len());
    assert_eq!(reasons(0x48), vec!["hw_slowdown", "hw_thermal"]);
    assert!(reasons(0).is_empty());
}

#[test]
fn headers_errors_and_short_lines_are_no_sample() {
    assert_eq!(parse_line("index, uuid, name", 1), None);
    assert_eq!(
        parse_line("Field \"x\" is not a valid field to query.", 1),
        None
    );
    let header = QUERY.join(", ");
    assert_eq!(
        parse_line(&header, 1),
        None,
        "a header's index is no number"
    );
}

#[test]
fn samples_round_trip_and_a_tail_reads_only_whole_new_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("node-0.gpus.jsonl");
    let mut tail = Tail::new(path.clone());
    let mut seen = Vec::new();
    assert_eq!(tail.read(&mut seen).expect("read"), 0, "no file yet");
    let mut a = parse_line(H100_BUSY, 10).expect("a");
    a.ranks = vec![0];
    let b = parse_line(H100_IDLE, 10).expect("b");
    append(&path, &[a.clone(), b.clone()]).expect("append");
    assert_eq!(tail.read(&mut seen).expect("read"), 2);
    assert_eq!(seen, vec![a.clone(), b.clone()]);
    // A line still being written waits for its newline.
    let mut f = OpenOptions::new().append(true).open(&path).expect("open");
    let line = serde_json::to_string(&a).expect("json");
    f.write_all(&line.as_bytes()[..10]).expect("write");
    assert_eq!(tail.read(&mut seen).expect("read"), 0);
    f.write_all(&line.as_bytes()[10..]).expect("write");
    f.write_all(b"\n").expect("write");
    assert_eq!(tail.read(&mut seen).expect("read"), 1);
    assert_eq!(read(&path).expect("read").len(), 3);
}

fn sample(gpu: u32, util: f64, used: f64, reasons: u64) -> Sample {
    Sample {
        t: 0,
        gpu,
        util: Some(util),
        mem_used: Some(used),
        mem_total: Some(80_000.0),
        reasons: super::reasons(reasons),
        ..Sample::default()
    }
}

#[test]
fn a_gpu_far_below_the_others_is_idle_and_a_quiet_job_flags_none() {
    let busy = [
        sample(0, 95.0, 1000.0, 0),
        sample(1, 92.0, 1000.0, 0),
        sample(2, 5.0, 1000.0, 0x1),
        sample(3, 90.0, 1000.0, 0),
    ];
    let flags = flags_now(&busy.iter().collect::<Vec<_>>());
    assert!(flags[0].is_empty() && flags[1].is_empty() && flags[3].is_empty());
    assert!(
        matches!(flags[2].as_slice(), [Flag::Idle { util, .. }] if *util == 5.0),
        "{flags:?}"
    );
    let quiet = [sample(0, 3.0, 10.0, 0x1), sample(1, 0.0, 10.0, 0x1)];
    let flags = flags_now(&quiet.iter().collect::<Vec<_>>());
    assert!(flags.iter().all(Vec::is_empty), "{flags:?}");
}

#[test]
fn throttling_and_full_memory_are_flagged() {
    let gpus = [sample(0, 95.0, 79_000.0, 0), sample(1, 95.0, 1000.0, 0x40)];
    let flags = flags_now(&gpus.iter().collect::<Vec<_>>());
    assert_eq!(flags[0].len(), 1);
    assert_eq!(flags[0][0].word(), "MEM");
    assert_eq!(
        flags[1],
        vec![Flag::Throttled {
            by: vec!["hw_thermal".to_owned()]
        }]
    );
    assert_eq!(flags[1][0].words(), "throttled by hw_thermal");
}

#[test]
fn summaries_are_per_gpu_and_over_the_run() {
    let mut samples = Vec::new();
    for t in 0..8u64 {
        let mut a = sample(0, 90.0 + (t % 2) as f64, 1000.0 + t as f64, 0);
        a.t = t;
        a.ranks = vec![0];
        let mut b = sample(1, 10.0, 500.0, if t < 4 { 0x4 } else { 0 });
        b.t = t;
        b.ranks = vec![1];
        samples.extend([a, b]);
    }
    let s = summarize(1, &samples);
    assert_eq!(s.len(), 2);
    assert_eq!((s[0].node, s[0].gpu, s[0].samples), (1, 0, 8));
    assert_eq!(s[0].mean_util, Some(90.5));
    assert_eq!(s[0].max_mem_used, Some(1007.0));
    assert_eq!(s[0].ranks, vec![0]);
    assert_eq!(s[1].throttled, 0.5);
    assert_eq!(s[1].throttled_by, vec!["sw_power_cap"]);
    let flags = flags_over(&s);
    assert!(flags[0].is_empty());
    let words: Vec<&str> = flags[1].iter().map(Flag::word).collect();
    assert_eq!(words, vec!["IDLE", "THROTTLED"], "{flags:?}");
}

#[test]
fn a_driver_that_knows_fewer_fields_is_read_by_the_names_asked() {
    // The throttle reasons under their newer name, ECC and retired pages left out.
    let fields = [
        "index",
        "uuid",
        "name",
        "utilization.gpu",
        "memory.used",
        "memory.total",
        "power.draw",
        "power.limit",
        "temperature.gpu",
        "clocks.sm",
        "clocks_event_reasons.active",
    ];
    let line = "3, GPU-aa, NVIDIA A100-SXM4-80GB, 88, 70000, 81920, 390.1, 400.00, 70, 1410, 0x0000000000000020";
    let s = parse_fields(&fields, line, 5).expect("a sample");
    assert_eq!(s.gpu, 3);
    assert_eq!(s.reasons, vec!["sw_thermal"]);
    assert_eq!(s.ecc_uncorrected, None);
    assert_eq!(
        parse_fields(&fields, H100_BUSY, 5),
        None,
        "13 values for 11 fields"
    );
    assert_eq!(
        other_name("clocks_throttle_reasons.active"),
        Some("clocks_event_reasons.active")
    );
    assert_eq!(other_name("power.draw"), None);
}
