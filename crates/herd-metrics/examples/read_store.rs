//! `read_store DIR`: reads every rank's metrics in the attempt folder DIR as `herd report`
//! does (`herd_metrics::store::read_attempt`) and prints `ranks readings ms` (bench/metrics).

use std::time::Instant;

fn main() -> std::process::ExitCode {
    let Some(dir) = std::env::args_os().nth(1) else {
        eprintln!("usage: read_store ATTEMPT_DIR");
        return std::process::ExitCode::from(2);
    };
    let start = Instant::now();
    match herd_metrics::store::read_attempt(std::path::Path::new(&dir)) {
        Ok(all) => {
            let ms = start.elapsed().as_secs_f64() * 1e3;
            let readings: usize = all.iter().map(|(_, s)| s.len()).sum();
            println!("{} {readings} {ms:.1}", all.len());
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("read_store: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
