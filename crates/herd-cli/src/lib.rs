//! herd's command line: the command tree (docs/design.md §1) and its dispatch.
//!
//! The `herd` binary is a thin `main` over [`main`]: parse, run, map the outcome to an exit
//! code. Each command's logic lives in its own library crate as it is built; a command that is
//! not built yet exits with [`ExitStatus::Usage`] and says so, and never prints fake output.

use std::ffi::OsString;
use std::io::Write;

use clap::{Parser, Subcommand};

pub mod env;
pub mod exec;
pub mod hostlist;
pub mod launch;
pub mod submit;

/// Exit codes of `herd`, documented in `docs/cli.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// The command did what was asked.
    Success = 0,
    /// The command ran and failed (a job failed, a check found problems, …).
    Failure = 1,
    /// The command line was wrong, or the command is not available in this build.
    Usage = 2,
}

/// Errors a command reports; each maps to an exit code ([`CliError::exit_status`]).
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The command line is wrong in a way clap cannot tell.
    #[error("{0}")]
    Usage(String),
    /// The input (an argument's value, stdin, a file) is invalid.
    #[error("{0}")]
    Input(String),
    /// The SLURM environment is missing or inconsistent.
    #[error(transparent)]
    Allocation(#[from] herd_slurm::AllocationError),
    /// Launching or supervising the job failed before workers could report.
    #[error("{0}")]
    Launch(String),
    /// Writing the output failed.
    #[error("cannot write output: {0}")]
    Io(#[from] std::io::Error),
    /// A command listed in `herd --help` whose implementation has not landed yet.
    #[error("`herd {command}` is not implemented in herd {version} yet ({tracking})")]
    NotImplemented {
        /// The subcommand name as typed.
        command: &'static str,
        /// This build's version.
        version: &'static str,
        /// Where the work is tracked.
        tracking: &'static str,
    },
}

impl CliError {
    /// The exit code this error maps to.
    pub fn exit_status(&self) -> ExitStatus {
        match self {
            CliError::NotImplemented { .. } | CliError::Usage(_) | CliError::Input(_) => {
                ExitStatus::Usage
            }
            CliError::Allocation(_) | CliError::Io(_) | CliError::Launch(_) => ExitStatus::Failure,
        }
    }
}

/// Launch and keep alive distributed training jobs on SLURM clusters.
///
/// `herd submit` plans a job, snapshots the code into an experiment folder that is never
/// overwritten and queues it; inside the allocation one `herd launch` agent per node starts
/// and supervises the workers. `herd run` runs the same job on this machine.
#[derive(Debug, Parser)]
#[command(name = "herd", version, propagate_version = true, max_term_width = 100)]
pub struct Cli {
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Arguments of a command that is not built yet: accepted whole so the user sees the
/// "not implemented" message rather than a parse error about flags that will exist.
#[derive(Debug, Clone, clap::Args)]
pub struct PendingArgs {
    /// Arguments for the command (not interpreted yet).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    pub args: Vec<OsString>,
}

/// herd's commands (docs/design.md §1).
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Plan a job, create its experiment folder, snapshot the code and queue it with sbatch.
    Submit(submit::SubmitArgs),
    /// Run a job here: N simulated nodes on this machine, or on the nodes of the current
    /// allocation.
    Run(launch::RunArgs),
    /// Per-node agent started by the batch script (`srun --ntasks-per-node=1 herd launch`).
    Launch(launch::LaunchArgs),
    /// Per-task shim for one-task-per-GPU `srun` launch: map SLURM_* to rank variables and
    /// exec.
    Exec(exec::ExecArgs),
    /// State of jobs and experiments, from one batched scheduler query.
    Status(PendingArgs),
    /// Per-rank logs of an experiment, by attempt.
    Logs(PendingArgs),
    /// Cancel a job by name or id.
    Cancel(PendingArgs),
    /// Live view of a running job: per-rank state, step, throughput, loss, stragglers.
    Top(PendingArgs),
    /// Plots and scaling tables of finished runs.
    Report(PendingArgs),
    /// Check a job before queueing it; every finding names the key to change.
    Check(submit::CheckArgs),
    /// Expand, compress and count SLURM hostlist expressions.
    Hostlist(hostlist::HostlistArgs),
    /// Print where this SLURM task sits (nodes, master, ranks) and the variables herd gives
    /// a worker.
    Env(env::EnvArgs),
}

impl Command {
    /// The subcommand's name as typed on the command line.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Submit(_) => "submit",
            Command::Run(_) => "run",
            Command::Launch(_) => "launch",
            Command::Exec(_) => "exec",
            Command::Status(_) => "status",
            Command::Logs(_) => "logs",
            Command::Cancel(_) => "cancel",
            Command::Top(_) => "top",
            Command::Report(_) => "report",
            Command::Check(_) => "check",
            Command::Hostlist(_) => "hostlist",
            Command::Env(_) => "env",
        }
    }

    /// Where the work on a command that is not built yet is tracked.
    fn tracking(&self) -> &'static str {
        match self {
            Command::Hostlist(_) | Command::Env(_) => "issue #3",
            Command::Launch(_) | Command::Run(_) => "issue #4",
            Command::Submit(_) | Command::Check(_) | Command::Exec(_) => "issue #5",
            Command::Status(_)
            | Command::Logs(_)
            | Command::Cancel(_)
            | Command::Top(_)
            | Command::Report(_) => "not scheduled yet",
        }
    }
}

/// Run a parsed command line, writing its output to `out`.
pub fn run(cli: Cli, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    match cli.command {
        Command::Hostlist(args) => hostlist::run(args, out),
        Command::Env(args) => env::run(args, out),
        Command::Launch(args) => launch::launch(args),
        Command::Run(args) => launch::run(args),
        Command::Exec(args) => exec::run(args),
        Command::Check(args) => submit::run_check(args, out),
        Command::Submit(args) => submit::run_submit(args, out),
        command => Err(CliError::NotImplemented {
            command: command.name(),
            version: env!("CARGO_PKG_VERSION"),
            tracking: command.tracking(),
        }),
    }
}

/// Parse `std::env::args_os`, run, report errors on stderr and return the process exit code.
pub fn main() -> std::process::ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // clap prints help/version to stdout (exit 0) and usage errors to stderr (exit 2).
            let _ = err.print();
            return std::process::ExitCode::from(if err.use_stderr() {
                ExitStatus::Usage as u8
            } else {
                ExitStatus::Success as u8
            });
        }
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let result = run(cli, &mut out).and_then(|status| {
        out.flush()?;
        Ok(status)
    });
    let status = match result {
        Ok(status) => status,
        // A closed pipe (`herd hostlist expand … | head`) is the reader's choice, not an error.
        Err(CliError::Io(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitStatus::Success,
        Err(err) => {
            let _ = writeln!(std::io::stderr().lock(), "herd: error: {err}");
            err.exit_status()
        }
    };
    std::process::ExitCode::from(status as u8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_tree_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn names_match_clap_subcommands() {
        let cmd = Cli::command();
        for sub in cmd.get_subcommands() {
            let name = sub.get_name().to_owned();
            // The fewest arguments each command accepts.
            let rest: &[&str] = match name.as_str() {
                "hostlist" => &["count", "x"],
                "run" | "launch" | "exec" => &["--", "true"],
                "submit" | "check" => &[],
                _ => &[],
            };
            let mut argv = vec!["herd", name.as_str()];
            argv.extend(rest);
            let parsed = Cli::try_parse_from(argv)
                .unwrap_or_else(|e| panic!("`herd {name}` does not parse: {e}"));
            assert_eq!(parsed.command.name(), name);
        }
    }

    #[test]
    fn pending_command_accepts_any_flags_and_reports_not_implemented() {
        let cli = Cli::try_parse_from(["herd", "report", "--plots", "x.png", "--", "a b"])
            .expect("pending command must accept arbitrary arguments");
        let err = run(cli, &mut Vec::new()).expect_err("report is not built yet");
        assert_eq!(err.exit_status(), ExitStatus::Usage);
        assert!(err.to_string().contains("`herd report` is not implemented"));
    }
}
