//! Differential test of `herd-hostlist` against SLURM itself: thousands of random hostlist
//! expressions expanded by [`HostList::parse`] (through `for_each` and `to_hosts`) and by
//! `scontrol show hostnames`, and random
//! host lists compressed by [`compress`] and by `scontrol show hostlist`, must agree exactly
//! (order and duplicates included).
//!
//! The generator produces only input SLURM 22.05 accepts (see [`gen_expression`] and
//! [`gen_host_list`]); any complaint from `scontrol` about a generated input fails the test,
//! since it means the generator is wrong. The random stream is seeded: the seed is printed
//! and shown in every failure, and `HERD_HOSTLIST_SEED=<seed>` replays a run.

use std::fmt::Write as _;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use herd_hostlist::{compress, count, expand, HostList};
use herd_testbed::Bed;

/// Seed used unless `HERD_HOSTLIST_SEED` (decimal or `0x` hex) says otherwise.
const DEFAULT_SEED: u64 = 0x4845_5244_0022_0508;
const SEED_VAR: &str = "HERD_HOSTLIST_SEED";

/// Random expressions compared with `scontrol show hostnames`.
const EXPRESSIONS: usize = 2000;
/// Random host lists compared with `scontrol show hostlist`.
const HOST_LISTS: usize = 1000;
/// Most hosts a random expression expands to.
const MAX_EXPANSION: u64 = 2000;
/// Most hosts one range may name in SLURM 22.05 (`MAX_RANGE`).
const SLURM_MAX_RANGE: u64 = 65_536;
/// A joined host list stays below this, so it fits in one argv string.
const MAX_LIST_BYTES: usize = 100_000;
/// Most digits a generated number is written with (herd rejects more than 18).
const MAX_DIGITS: usize = 18;
/// Threads calling `scontrol` (the bed has 2 cores).
const THREADS: usize = 2;
/// One `scontrol` call takes a few milliseconds; a hung one fails its case.
const SCONTROL_TIMEOUT: Duration = Duration::from_secs(20);
/// Failures shown in full in the panic message.
const SHOWN_FAILURES: usize = 5;

// ---------------------------------------------------------------------------------------
// Random numbers: xorshift64*, seeded through splitmix64. Small, stable across versions.

struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }

    fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        debug_assert!(lo <= hi);
        match (hi - lo).checked_add(1) {
            Some(n) => lo + self.next_u64() % n,
            None => self.next_u64(),
        }
    }

    fn index(&mut self, len: usize) -> usize {
        (self.next_u64() % len as u64) as usize
    }

    /// True with probability `percent`/100.
    fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.index(items.len())]
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.index(i + 1));
        }
    }
}

fn seed() -> u64 {
    let Ok(text) = std::env::var(SEED_VAR) else {
        return DEFAULT_SEED;
    };
    let text = text.trim();
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16),
        None => text.replace('_', "").parse(),
    };
    parsed.unwrap_or_else(|e| panic!("{SEED_VAR}={text:?} is not a u64: {e}"))
}

// ---------------------------------------------------------------------------------------
// Generators.

/// Characters of host names and of the text around bracket groups.
const NAME_CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-._";
const PREFIXES: &[&str] = &[
    "n",
    "node",
    "gpu-a",
    "gpu-b",
    "rack1n",
    "rack01n",
    "r0n",
    "rn",
    "r00n",
    "c1-r2-",
    "x.y_",
    "login",
    "Node",
    "a1b",
    "-",
    "n-",
    "ib.",
    "cn_",
    "dgx-h100-",
    "s",
    "S",
    "a.b.c",
];

fn digits(v: u64) -> usize {
    v.checked_ilog10().map_or(1, |d| d as usize + 1)
}

fn trailing_digits(host: &str) -> usize {
    host.bytes().rev().take_while(u8::is_ascii_digit).count()
}

/// Random text of `min..=max` name characters; sometimes a realistic prefix.
fn gen_text(rng: &mut Rng, min: usize, max: usize) -> String {
    if rng.chance(40) {
        let p = *rng.pick(PREFIXES);
        if (min..=max).contains(&p.len()) {
            return p.to_owned();
        }
    }
    let len = rng.range(min as u64, max as u64) as usize;
    (0..len).map(|_| *rng.pick(NAME_CHARS) as char).collect()
}

/// A number: mostly small, sometimes medium, rarely up to 18 digits.
fn gen_number(rng: &mut Rng) -> u64 {
    match rng.range(0, 9) {
        0..=4 => rng.range(0, 20),
        5..=7 => rng.range(0, 10_000),
        _ => {
            let d = rng.range(5, MAX_DIGITS as u64) as u32;
            rng.range(0, 10u64.pow(d) - 1)
        }
    }
}

/// `v` written with random zero padding, never past [`MAX_DIGITS`] digits.
fn padded(rng: &mut Rng, v: u64, pad_percent: u64) -> String {
    let extra = if rng.chance(pad_percent) {
        rng.range(1, 3) as usize
    } else {
        0
    };
    let width = (digits(v) + extra).min(MAX_DIGITS);
    format!("{v:0width$}")
}

/// A bracket group naming between 1 and `cap` hosts: `(text, hosts)`.
fn gen_group(rng: &mut Rng, cap: u64) -> (String, u64) {
    let mut text = String::from("[");
    let mut hosts = 0;
    let ranges = rng.range(1, 4);
    for i in 0..ranges {
        let room = cap - hosts;
        if room == 0 {
            break;
        }
        if i > 0 {
            text.push(',');
        }
        let size = match rng.range(0, 9) {
            0..=3 => 1,
            4..=7 => rng.range(1, room.min(12)),
            _ => rng.range(1, room),
        };
        let lo = gen_number(rng).min(10u64.pow(MAX_DIGITS as u32) - size);
        let hi = lo + size - 1;
        assert!(size <= SLURM_MAX_RANGE);
        text.push_str(&padded(rng, lo, 30));
        if size > 1 || rng.chance(15) {
            text.push('-');
            text.push_str(&padded(rng, hi, 15));
        }
        hosts += size;
    }
    text.push(']');
    (text, hosts)
}

/// `n`-th root of `budget`, rounded down, at least 1: an even share for each of `n` groups.
fn share(budget: u64, n: u32) -> u64 {
    let mut r = (budget as f64).powf(1.0 / f64::from(n)) as u64;
    while r > 1 && r.checked_pow(n).is_none_or(|p| p > budget) {
        r -= 1;
    }
    r.max(1)
}

/// One item naming at most `budget` hosts: text and bracket groups, no text after the last
/// group (SLURM 22.05 rejects `n[1-2]-ib`). Returns `(text, hosts)`.
fn gen_item(rng: &mut Rng, budget: u64) -> (String, u64) {
    let groups = match rng.range(0, 19) {
        0..=3 => 0,
        4..=13 => 1,
        14..=17 => 2,
        _ => rng.range(3, 4),
    } as usize;
    if groups == 0 {
        return (gen_text(rng, 1, 12), 1);
    }
    // With the known order difference, only one group before the last may vary.
    let mut text = if rng.chance(15) {
        String::new()
    } else {
        gen_text(rng, 1, 10)
    };
    let mut hosts = 1u64;
    for g in 0..groups {
        if g > 0 && rng.chance(50) {
            text.push_str(&gen_text(rng, 1, 4));
        }
        let left = budget / hosts;
        let mut cap = share(left, (groups - g) as u32);
        if rng.chance(20) {
            cap = left;
        }
        let (group, n) = gen_group(rng, cap.max(1));
        text.push_str(&group);
        hosts *= n;
    }
    (text, hosts)
}

/// An expression SLURM accepts, expanding to 1..=[`MAX_EXPANSION`] hosts.
fn gen_expression(rng: &mut Rng) -> String {
    // SLURM separates items by `,`, ` ` and `\t` only; a newline is part of a host name.
    const SEPARATORS: &[&str] = &[",", ",", ",", ",", " ", ", ", ",,", "\t", " ,", "\t,"];
    let items = match rng.range(0, 9) {
        0..=3 => 1,
        4..=7 => rng.range(2, 3),
        _ => rng.range(4, 8),
    };
    let mut budget = MAX_EXPANSION;
    let mut expr = String::new();
    if rng.chance(3) {
        expr.push_str(rng.pick::<&str>(SEPARATORS));
    }
    for i in 0..items {
        if budget == 0 {
            break;
        }
        if i > 0 {
            expr.push_str(rng.pick::<&str>(SEPARATORS));
        }
        let share = if rng.chance(70) {
            budget.div_ceil(items - i)
        } else {
            budget
        };
        let (item, hosts) = gen_item(rng, share);
        expr.push_str(&item);
        budget -= hosts;
    }
    if rng.chance(3) {
        expr.push_str(rng.pick::<&str>(SEPARATORS));
    }
    expr
}

/// A host list SLURM accepts: hosts with various prefixes, optional numeric suffixes with
/// random padding, runs, duplicates, random order; no separators or brackets in a host.
fn gen_host_list(rng: &mut Rng) -> Vec<String> {
    const TAILS: &[&str] = &["-ib", "a", ".x", "-eth0x", "_"];
    let target = match rng.range(0, 9) {
        0..=2 => rng.range(1, 8),
        3..=7 => rng.range(1, 100),
        _ => rng.range(100, 3000),
    } as usize;
    let prefixes: Vec<String> = (0..rng.range(1, 5))
        .map(|_| {
            if rng.chance(10) {
                String::new()
            } else {
                gen_text(rng, 1, 10)
            }
        })
        .collect();
    let mut hosts: Vec<String> = Vec::with_capacity(target);
    let mut bytes = 0;
    'fill: while hosts.len() < target {
        let prefix = rng.pick(&prefixes).clone();
        let mut new: Vec<String> = Vec::new();
        match rng.range(0, 9) {
            // A run of consecutive numbers, one width, sometimes with gaps.
            0..=4 => {
                let len = rng.range(1, 30);
                let start = gen_number(rng).min(10u64.pow(MAX_DIGITS as u32) - 2 * len);
                let width = if rng.chance(30) {
                    (digits(start) + rng.range(1, 3) as usize).min(MAX_DIGITS)
                } else {
                    0
                };
                let mut v = start;
                for _ in 0..len {
                    new.push(format!("{prefix}{v:0width$}"));
                    v += if rng.chance(10) { 2 } else { 1 };
                }
            }
            // One number, random padding.
            5 | 6 => {
                let v = gen_number(rng);
                new.push(format!("{prefix}{}", padded(rng, v, 30)));
            }
            // The same number with different paddings.
            7 => {
                let v = rng.range(0, 12);
                for _ in 0..rng.range(2, 3) {
                    new.push(format!("{prefix}{}", padded(rng, v, 50)));
                }
            }
            // No trailing number.
            8 => {
                let tail = if prefix.is_empty() || rng.chance(50) {
                    let v = gen_number(rng);
                    format!("{v}{}", *rng.pick(TAILS))
                } else {
                    String::new()
                };
                new.push(format!("{prefix}{tail}"));
            }
            // Duplicates of earlier hosts.
            _ => {
                if hosts.is_empty() {
                    continue;
                }
                for _ in 0..rng.range(1, 3) {
                    new.push(rng.pick(&hosts).clone());
                }
            }
        }
        for host in new {
            // SLURM reads a trailing number of any length (saturating past 2^64 - 1); herd
            // only up to 18 digits. Keep to where both are defined to agree.
            if trailing_digits(&host) > MAX_DIGITS {
                continue;
            }
            if hosts.len() >= target || bytes + host.len() + 1 >= MAX_LIST_BYTES {
                break 'fill;
            }
            bytes += host.len() + 1;
            hosts.push(host);
        }
    }
    match rng.range(0, 9) {
        0..=1 => rng.shuffle(&mut hosts),
        2..=3 if hosts.len() > 1 => {
            for _ in 0..rng.range(1, 10) {
                let i = rng.index(hosts.len() - 1);
                hosts.swap(i, i + 1);
            }
        }
        _ => {}
    }
    hosts
}

// ---------------------------------------------------------------------------------------
// Cases.

/// Fixed expressions: SLURM's results for these are known corners.
const REGRESSION_EXPRESSIONS: &[&str] = &[
    "gpu-a[01-03],login1",
    "a[1-2]b[1-2]",
    "a[1-2][3-4]",
    "[1-2][3-4]",
    "a[1-2]-[3-4]",
    "a[1-2]b[3]c[4-5]",
    "a[1-2]b[1-2]c[1-2]",
    "a[1-2]b[1-3]c[1-2]d[1-2]",
    "n[1234567890123456789-1234567890123456790]",
    "n[0000000000000000001]",
    "a[1,3]b[07]c[4-5],x",
    "rack[1-2]n[01-04]",
    "n[8-10]",
    "n[008-10]",
    "n[9-011]",
    "n[01-3]",
    "n[1-03]",
    "n[000]",
    "n[5-5]",
    "x[1,1,2]",
    "n[3,1,2]",
    "n[1-2],n[2-3]",
    "[1-2]",
    "a[0-1],,b",
    " a , b ",
    "n[1-2] m[3-4]",
    "a\tb c",
    "n1[1-2]",
    "1[1-2]",
    "007",
    "-n[1-2]",
    "n[8-9],n[10]",
    "n[1-9],n[010-011]",
    "n[08-09],n[10-11]",
    "n[0-65535]",
    "n[1-65536]",
    "n[999999999999999990-999999999999999999]",
    "n[000000000000000001-3]",
    "a[4294967295-4294967297]b[1-2]",
    "a[2147483647-2147483648]b[1]",
    "a.b_c-d[1-2]",
];

/// Fixed host lists (joined with commas).
const REGRESSION_LISTS: &[&str] = &[
    "n2,n1,n3",
    "n1,n1,n2",
    "n01,n2,n03",
    "n8,n9,n10",
    "n08,n09,n10",
    "n9,n10,n11",
    "n009,n010,n011",
    "n9,n010",
    "n001,n1",
    "n10,n9",
    "n0,n00,n000",
    "n00,n1",
    "n1,n3,n5,n6",
    "n1,n2,n1,n2",
    "a1b1,a1b2,a2b1",
    "a01b1,a1b2",
    "a,b,a",
    "x,x1,x,x2",
    "n1-ib,n2-ib",
    "gpu-a01,gpu-a02,login1,gpu-a03",
    "n1,m1,n2",
    "node1,node2,Node3",
    "n-1,n-2",
    "1,2,3",
    "r0n1,rn2,r00n3,r0n4,r0n5",
    "rack1n1,rack01n2,rack1n3",
    "n123456789012345678,n123456789012345679",
    "n99999999999999998,n099999999999999999",
    "-a1,-a2,b",
];

#[derive(Debug, Clone)]
enum Case {
    /// Expand this expression.
    Expand(String),
    /// Compress these hosts.
    Compress(Vec<String>),
}

struct Failure {
    index: usize,
    why: String,
}

fn cases(rng: &mut Rng) -> Vec<Case> {
    let mut cases: Vec<Case> = REGRESSION_EXPRESSIONS
        .iter()
        .map(|e| Case::Expand((*e).to_owned()))
        .collect();
    cases.extend(
        REGRESSION_LISTS
            .iter()
            .map(|l| Case::Compress(l.split(',').map(str::to_owned).collect())),
    );
    cases.extend((0..EXPRESSIONS).map(|_| Case::Expand(gen_expression(rng))));
    cases.extend((0..HOST_LISTS).map(|_| Case::Compress(gen_host_list(rng))));
    cases
}

// ---------------------------------------------------------------------------------------
// Running and comparing.

/// `scontrol show WHAT -- ARG`: its stdout, or why it is not a clean answer. scontrol exits
/// 0 even on an invalid hostlist and says so on stderr, so any stderr is a failure.
fn scontrol(what: &str, arg: &str) -> Result<String, String> {
    let mut child = Command::new("scontrol")
        .args(["show", what, "--", arg])
        .env_remove("SLURM_JOB_NODELIST")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not run scontrol: {e}"))?;
    let read = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let stdout = read(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = read(child.stderr.take().map(|p| Box::new(p) as _));
    let deadline = Instant::now() + SCONTROL_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => break None,
            Ok(Some(status)) => break Some(status.to_string()),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(1)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                break Some(format!("killed after {SCONTROL_TIMEOUT:?}"));
            }
            Err(e) => break Some(format!("wait failed: {e}")),
        }
    };
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    if status.is_some() || !stderr.trim().is_empty() || stdout.is_empty() {
        let status = status.as_deref().unwrap_or("exit status 0");
        return Err(format!(
            "scontrol show {what} failed ({status}): stderr {:?}, stdout {:?}",
            clip(&stderr, 400),
            clip(&stdout, 400)
        ));
    }
    Ok(stdout)
}

fn clip(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}… ({} bytes in all)", &s[..i], s.len()),
        None => s.to_owned(),
    }
}

/// Where two host sequences first differ, with a few hosts of context.
fn host_diff(ours: &[String], theirs: &[String]) -> String {
    let at = ours
        .iter()
        .zip(theirs)
        .position(|(a, b)| a != b)
        .unwrap_or(ours.len().min(theirs.len()));
    let from = at.saturating_sub(3);
    let window = |v: &[String]| v[from.min(v.len())..(at + 4).min(v.len())].join(" ");
    format!(
        "{} hosts from herd, {} from scontrol; first difference at host #{at}:\n    \
         herd     [{from}..]: {}\n    scontrol [{from}..]: {}",
        ours.len(),
        theirs.len(),
        window(ours),
        window(theirs)
    )
}

fn check_expand(expr: &str) -> Result<(), String> {
    let theirs: Vec<String> = scontrol("hostnames", expr)
        .map_err(|e| format!("generator produced input SLURM rejects: {e}"))?
        .lines()
        .map(str::to_owned)
        .collect();
    let ours = HostList::parse(expr).map_err(|e| {
        format!(
            "herd rejects it: {e}\n  scontrol: {} hosts: {}",
            theirs.len(),
            clip(&theirs.join(" "), 600)
        )
    })?;
    let mut hosts = Vec::new();
    ours.for_each(|h| hosts.push(h.to_owned()));
    if hosts != theirs {
        return Err(format!(
            "expansions differ: {}\n  herd:     {}\n  scontrol: {}",
            host_diff(&hosts, &theirs),
            clip(&hosts.join(" "), 600),
            clip(&theirs.join(" "), 600)
        ));
    }
    let packed = ours.to_hosts().to_vec();
    if packed != theirs {
        return Err(format!(
            "to_hosts() differs (for_each agrees with scontrol): {}",
            host_diff(&packed, &theirs)
        ));
    }
    let n = theirs.len() as u64;
    if ours.len() != n || count(expr) != Ok(n) {
        return Err(format!(
            "herd's len() {} / count() {:?} disagree with {n} hosts",
            ours.len(),
            count(expr)
        ));
    }
    Ok(())
}

fn check_compress(hosts: &[String]) -> Result<(), String> {
    let joined = hosts.join(",");
    let theirs = scontrol("hostlist", &joined)
        .map_err(|e| format!("generator produced input SLURM rejects: {e}"))?;
    let theirs = theirs.strip_suffix('\n').unwrap_or(&theirs);
    let ours = compress(hosts);
    if ours != theirs {
        let at = ours
            .bytes()
            .zip(theirs.bytes())
            .position(|(a, b)| a != b)
            .unwrap_or(ours.len().min(theirs.len()));
        let around = |s: &str| {
            let mut from = at.saturating_sub(40);
            while !s.is_char_boundary(from) {
                from -= 1;
            }
            let mut to = (at + 40).min(s.len());
            while !s.is_char_boundary(to) {
                to += 1;
            }
            format!("…{}…", &s[from..to])
        };
        return Err(format!(
            "compressions differ at byte {at}: herd {} vs scontrol {}\n  \
             herd:     {}\n  scontrol: {}",
            around(&ours),
            around(theirs),
            clip(&ours, 600),
            clip(theirs, 600)
        ));
    }
    match expand(&ours) {
        Ok(back) if back == hosts => Ok(()),
        Ok(back) => Err(format!(
            "expand(compress(hosts)) is not the hosts: {}",
            host_diff(&back, hosts)
        )),
        Err(e) => Err(format!(
            "herd cannot expand its own compression {ours:?}: {e}"
        )),
    }
}

/// The input of a case; a long host list is cut unless `full`.
fn describe(case: &Case, full: bool) -> String {
    match case {
        Case::Expand(expr) => format!("expand {expr:?}"),
        Case::Compress(hosts) => {
            let joined = hosts.join(",");
            let shown = if full { joined } else { clip(&joined, 2000) };
            format!("compress {} hosts {shown:?}", hosts.len())
        }
    }
}

fn run(index: usize, case: &Case) -> Option<Failure> {
    let result = match case {
        Case::Expand(expr) => check_expand(expr),
        Case::Compress(hosts) => check_compress(hosts),
    };
    result.err().map(|why| Failure { index, why })
}

#[test]
fn hostlist_differential_against_scontrol() {
    let _bed = Bed::require();
    let seed = seed();
    println!(
        "hostlist differential: seed {seed:#x} (replay with {SEED_VAR}={seed:#x}); \
         {EXPRESSIONS} expressions, {HOST_LISTS} host lists, {} regressions",
        REGRESSION_EXPRESSIONS.len() + REGRESSION_LISTS.len()
    );
    let mut rng = Rng::new(seed);
    let cases = cases(&mut rng);
    let started = Instant::now();
    let mut failures: Vec<Failure> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                let cases = &cases;
                s.spawn(move || {
                    (t..cases.len())
                        .step_by(THREADS)
                        .filter_map(|i| run(i, &cases[i]))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("worker thread panicked"))
            .collect()
    });
    println!(
        "{} cases against scontrol in {:.1?}",
        cases.len(),
        started.elapsed()
    );
    if failures.is_empty() {
        return;
    }
    failures.sort_by_key(|f| f.index);
    let mut msg = format!(
        "herd-hostlist disagrees with scontrol on {} of {} cases (seed {seed:#x}, replay with \
         {SEED_VAR}={seed:#x}):\n",
        failures.len(),
        cases.len()
    );
    for (k, f) in failures.iter().take(SHOWN_FAILURES).enumerate() {
        let input = describe(&cases[f.index], k == 0);
        let _ = writeln!(msg, "\ncase #{}: {input}\n  {}", f.index, f.why);
    }
    if failures.len() > SHOWN_FAILURES {
        let rest: Vec<String> = failures[SHOWN_FAILURES..]
            .iter()
            .map(|f| f.index.to_string())
            .collect();
        let _ = writeln!(msg, "\nfailing cases not shown: #{}", rest.join(", #"));
    }
    panic!("{msg}");
}

/// Items of an expression: split at separators outside brackets.
fn top_level_items(expr: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut start, mut depth) = (0, 0);
    for (i, c) in expr.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' | ' ' | '\t' | '\n' if depth == 0 => {
                items.push(&expr[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&expr[start..]);
    items
}

/// The generators themselves: deterministic for a seed, inside their stated bounds.
#[test]
fn hostlist_differential_generators_stay_in_bounds() {
    let mut a = Rng::new(7);
    let mut b = Rng::new(7);
    for _ in 0..500 {
        let expr = gen_expression(&mut a);
        assert_eq!(expr, gen_expression(&mut b), "same seed, same expression");
        let n = count(&expr).unwrap_or_else(|e| panic!("{expr:?}: {e}"));
        assert!((1..=MAX_EXPANSION).contains(&n), "{expr:?} names {n} hosts");
        for item in top_level_items(&expr) {
            if let Some(close) = item.rfind(']') {
                assert_eq!(
                    close + 1,
                    item.len(),
                    "text after the last group in {expr:?}"
                );
            }
        }
        let hosts = gen_host_list(&mut a);
        assert_eq!(hosts, gen_host_list(&mut b), "same seed, same list");
        assert!(!hosts.is_empty());
        assert!(hosts.join(",").len() < MAX_LIST_BYTES);
        for h in &hosts {
            assert!(!h.is_empty(), "empty host in {hosts:?}");
            assert!(trailing_digits(h) <= MAX_DIGITS, "{h:?}: number too long");
            assert!(
                h.bytes().all(|c| NAME_CHARS.contains(&c)),
                "{h:?} has a character outside the name set"
            );
        }
    }
}
