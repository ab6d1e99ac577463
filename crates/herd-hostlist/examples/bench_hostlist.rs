//! In-process timing of herd-hostlist, for `bench/hostlist` (see `bench/README.md`).
//!
//! ```sh
//! cargo run --release -p herd-hostlist --example bench_hostlist -- 'gpu[1-30000],cpu[1-70000]' 21
//! ```
//!
//! Times, as the median of REPEATS runs (default 21) after one untimed warm-up run:
//! - `expand_s`: parse EXPR and expand it into a list, herd's packed [`Hosts`] (every name
//!   in one buffer; dropping it included, as a Python `expand_hostlist(expr)` call frees its
//!   result too);
//! - `expand_vec_s`: the same into a `Vec<String>` (one allocation per host);
//! - `for_each_s`: parse EXPR and visit every host with [`HostList::for_each`], building no
//!   list (what `herd hostlist expand` does before writing each host out);
//! - `compress_s`: [`compress`] of that list as given (order kept, like
//!   `scontrol show hostlist`);
//! - `sort_compress_s`: [`sort_hosts`] then [`compress`] of a copy of the list as given
//!   (what python-hostlist's `collect_hostlist` does: it sorts too);
//! - `sort_compress_shuffled_s`: the same on a copy shuffled once with a fixed seed.
//!
//! Prints one JSON line with the medians in seconds, the host count and a round-trip check
//! (`expand(compress(hosts)) == hosts`, done once, untimed). Timings are only printed,
//! never judged: the machine may be shared and noisy.

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Instant;

use herd_hostlist::{compress, expand, expand_hosts, sort_hosts, HostList, Hosts};

const USAGE: &str = "usage: bench_hostlist EXPR [REPEATS]";

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        samples[n / 2]
    } else {
        (samples[n / 2 - 1] + samples[n / 2]) / 2.0
    }
}

/// Median seconds of `f` over `repeats` runs after one warm-up; `setup` builds each run's
/// input outside the timed part, and what `f` returns is dropped outside it too.
fn time_median<I, O>(
    repeats: usize,
    mut setup: impl FnMut() -> I,
    mut f: impl FnMut(I) -> O,
) -> f64 {
    drop(black_box(f(setup())));
    let mut samples = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let input = setup();
        let start = Instant::now();
        let out = black_box(f(black_box(input)));
        samples.push(start.elapsed().as_secs_f64());
        drop(out);
    }
    median(samples)
}

/// Fisher–Yates with splitmix64 and a fixed seed: the same order on every run.
fn shuffled(hosts: &[String]) -> Vec<String> {
    let mut out = hosts.to_vec();
    let mut state: u64 = 0x5eed_0f4e_2d00;
    let mut next = || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    for i in (1..out.len()).rev() {
        let j = usize::try_from(next() % (i as u64 + 1)).unwrap_or(0);
        out.swap(i, j);
    }
    out
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (expr, repeats) = match args.as_slice() {
        [expr] => (expr.as_str(), 21),
        [expr, n] => match n.parse::<usize>() {
            Ok(n) if n > 0 => (expr.as_str(), n),
            _ => {
                eprintln!("bench_hostlist: REPEATS must be a positive integer, got {n:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        },
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let hosts = match HostList::parse(expr) {
        Ok(list) => list.hosts(),
        Err(err) => {
            eprintln!("bench_hostlist: {err}");
            return ExitCode::from(2);
        }
    };
    let compressed = compress(&hosts);
    let roundtrip_ok = expand(&compressed).is_ok_and(|back| back == hosts);
    let mut sorted = hosts.clone();
    sort_hosts(&mut sorted);
    let sorted_compressed = compress(&sorted);
    let shuffled_hosts = shuffled(&hosts);

    let expand_s = time_median(
        repeats,
        || expr,
        |e| expand_hosts(e).map(|h: Hosts| h.len()),
    );
    let expand_vec_s = time_median(repeats, || expr, |e| expand(e).map(|h| h.len()));
    let for_each_s = time_median(
        repeats,
        || expr,
        |e| {
            HostList::parse(e).map(|list| {
                let mut bytes = 0;
                list.for_each(|h| bytes += h.len());
                bytes
            })
        },
    );
    let compress_s = time_median(repeats, || (), |()| compress(&hosts));
    let sort_compress_s = time_median(
        repeats,
        || hosts.clone(),
        |mut h| {
            sort_hosts(&mut h);
            (compress(&h), h)
        },
    );
    let sort_compress_shuffled_s = time_median(
        repeats,
        || shuffled_hosts.clone(),
        |mut h| {
            sort_hosts(&mut h);
            (compress(&h), h)
        },
    );

    let fields: [(&str, String); 11] = [
        ("hosts", hosts.len().to_string()),
        ("repeats", repeats.to_string()),
        ("expand_s", format!("{expand_s:.9}")),
        ("expand_vec_s", format!("{expand_vec_s:.9}")),
        ("for_each_s", format!("{for_each_s:.9}")),
        ("compress_s", format!("{compress_s:.9}")),
        ("sort_compress_s", format!("{sort_compress_s:.9}")),
        (
            "sort_compress_shuffled_s",
            format!("{sort_compress_shuffled_s:.9}"),
        ),
        ("compressed_len", compressed.len().to_string()),
        ("sorted_compressed_len", sorted_compressed.len().to_string()),
        ("roundtrip_ok", roundtrip_ok.to_string()),
    ];
    let body: Vec<String> = fields.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
    println!("{{{}}}", body.join(","));
    ExitCode::SUCCESS
}
