//! `herd`: launch and keep alive distributed training jobs on SLURM clusters.
//!
//! A thin binary: everything lives in the library crates (see `herd-cli`).

fn main() -> std::process::ExitCode {
    herd_cli::main()
}
