//! herd's command line: the command tree (docs/design.md §1) and its dispatch.
//!
//! The `herd` binary is a thin `main` over [`main`]: parse, run, map the outcome to an exit
//! code. Each command's logic lives in its own library crate or module here.

use std::io::Write;

use clap::{Parser, Subcommand};

mod after;
pub mod cancel;
pub mod completions;
pub mod env;
pub mod exec;
pub mod goodput;
pub mod hostlist;
pub mod launch;
pub mod logs;
pub mod nodes;
pub mod report;
pub mod settle;
pub mod site;
mod snapshot_lines;
pub mod status;
pub mod submit;
pub mod sweep;
pub mod top;

#[cfg(test)]
mod doc_refs;
#[cfg(test)]
mod test_support;

/// Exit codes of `herd`, documented in `docs/cli.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// The command did what was asked.
    Success,
    /// The command ran and failed (a job failed, a check found problems, …).
    Failure,
    /// The command line was wrong.
    Usage,
    /// The exit code of a job herd waited for (`herd submit --wait`, `herd status -w`).
    Job(u8),
}

impl ExitStatus {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            ExitStatus::Success => 0,
            ExitStatus::Failure => 1,
            ExitStatus::Usage => 2,
            ExitStatus::Job(code) => code,
        }
    }
}

/// Errors a command reports. Each keeps the library error it comes from (reachable with
/// [`std::error::Error::source`]); [`CliError::exit_status`] maps the kind to the exit code.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The command line is wrong in a way clap cannot tell.
    #[error("{0}")]
    Usage(String),
    /// A value given in an argument, a variable or stdin is invalid (and no library error
    /// says why).
    #[error("{0}")]
    Input(String),
    /// A `--param NAME=VALUE` that is not one.
    #[error("--param {arg:?}: {source}")]
    Param {
        /// The argument as given.
        arg: String,
        /// Why it is not a parameter.
        #[source]
        source: herd_plan::ValueError,
    },
    /// A hostlist expression that does not parse (or expands to too many hosts).
    #[error("invalid hostlist in {operand}: {source}")]
    Hostlist {
        /// Which operand: `argument N` or `stdin`.
        operand: String,
        /// What is wrong and where.
        #[source]
        source: herd_hostlist::ParseError,
    },
    /// Reading stdin failed.
    #[error("cannot read {what} from stdin: {source}")]
    Stdin {
        /// What was read, e.g. `hostlists`.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The environment file of `herd env --from` cannot be read.
    #[error("cannot read environment file {}: {source}", path.display())]
    EnvFile {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A job file or cluster profile that cannot be read or is not valid.
    #[error("{0}")]
    JobFile(#[from] herd_plan::LoadError),
    /// The job file, profile and flags do not make a plan.
    #[error("{0}")]
    Plan(#[from] herd_plan::ResolveError),
    /// `--sweep`, the sweep file or the command's placeholders do not make a sweep: one
    /// line per problem.
    #[error("{}", .0.join("\nherd: error: "))]
    Sweep(Vec<String>),
    /// The plan cannot be written into a batch script.
    #[error("{0}")]
    Script(#[from] herd_plan::RenderError),
    /// `herd check` (or submit's check) found errors; they have been printed.
    #[error(
        "{errors} error{}: nothing written, nothing submitted",
        if *errors == 1 { "" } else { "s" }
    )]
    CheckFailed {
        /// How many findings are errors.
        errors: usize,
    },
    /// `herd submit` or `herd check` refused before writing anything: the error, which
    /// keeps its own exit code; [`CliError::report`] adds what was not written.
    #[error("{0}")]
    Refused(Box<CliError>),
    /// Creating, opening or updating an experiment folder failed.
    #[error("{0}")]
    Experiment(#[from] herd_exp::Error),
    /// The job was queued, but its id could not be written into the experiment's manifest.
    #[error("job {job_id} submitted, but its id could not be recorded: {source}")]
    RecordJobId {
        /// The id sbatch gave.
        job_id: String,
        /// Why it was not recorded.
        #[source]
        source: herd_exp::Error,
    },
    /// sbatch did not queue the job.
    #[error("sbatch refused {what}: {source}")]
    Sbatch {
        /// What was submitted, e.g. `the job, so no experiment folder was kept`.
        what: String,
        /// How the call failed.
        #[source]
        source: herd_slurm::SlurmError,
    },
    /// Another SLURM command (srun) could not be run.
    #[error("{0}")]
    Slurm(#[source] herd_slurm::SlurmError),
    /// The SLURM environment is missing or inconsistent.
    #[error("{0}")]
    Allocation(#[from] herd_slurm::AllocationError),
    /// A node has no address the other nodes can reach.
    #[error("{0}")]
    Addr(#[from] herd_slurm::allocation::addr::AddrError),
    /// This node's route to the master is not known.
    #[error("{0}")]
    Route(#[from] herd_slurm::allocation::net::RouteError),
    /// The agent stopped before supervision could report (rendezvous, log folder, …).
    #[error("{0}")]
    Agent(#[from] herd_agent::AgentError),
    /// The plan could not be recorded as JSON in the manifest.
    #[error("{0}")]
    PlanJson(#[source] serde_json::Error),
    /// The system refused something herd needs: starting a process, the working folder,
    /// the herd binary's path, randomness.
    #[error("{action}: {source}")]
    System {
        /// What was being done, e.g. `cannot start an agent`.
        action: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// Writing the output failed.
    #[error("cannot write output: {0}")]
    Output(#[from] std::io::Error),
}

impl From<herd_plan::SweepError> for CliError {
    fn from(e: herd_plan::SweepError) -> CliError {
        CliError::Sweep(e.problems)
    }
}

impl CliError {
    /// `CliError::System` for `action` failing with `source`.
    pub(crate) fn system(action: impl Into<String>) -> impl FnOnce(std::io::Error) -> CliError {
        let action = action.into();
        move |source| CliError::System { action, source }
    }

    /// The exit code this error maps to (`docs/cli.md`, "Exit codes"): 2 when the command
    /// line or its input is wrong, 1 when a command that was used right failed.
    pub fn exit_status(&self) -> ExitStatus {
        use herd_exp::Error as Exp;
        match self {
            CliError::Usage(_)
            | CliError::Input(_)
            | CliError::Param { .. }
            | CliError::Hostlist { .. }
            | CliError::EnvFile { .. }
            | CliError::JobFile(_)
            | CliError::Plan(_)
            | CliError::Sweep(_)
            | CliError::Script(_) => ExitStatus::Usage,
            // Bytes that are not text are bad input; a failing read is a failure.
            CliError::Stdin { source, .. } => match source.kind() {
                std::io::ErrorKind::InvalidData => ExitStatus::Usage,
                _ => ExitStatus::Failure,
            },
            CliError::Experiment(e) => match e {
                // What was asked for is wrong: another name, exclude or experiment root.
                Exp::Name(_)
                | Exp::NotFound { .. }
                | Exp::NotAnExperiment { .. }
                | Exp::NotASweep { .. }
                | Exp::BadSweep { .. }
                | Exp::BadExclude { .. }
                | Exp::ExpRootIsProject { .. } => ExitStatus::Usage,
                // Taken meanwhile: as when submit's check finds the folder (exit 1).
                Exp::AlreadyExists { .. }
                // The file system, git or an experiment's own files failed the operation.
                | Exp::Io { .. }
                | Exp::Walk { .. }
                | Exp::GitStart { .. }
                | Exp::Git { .. }
                | Exp::ManifestParse { .. }
                | Exp::ManifestFormat { .. }
                | Exp::NoSuchSubmission { .. }
                | Exp::JobIdAlreadySet { .. }
                | Exp::BadJobId { .. }
                | Exp::FileExists { .. } => ExitStatus::Failure,
                // `herd_exp::Error` is non-exhaustive: what it may add is a failure.
                _ => ExitStatus::Failure,
            },
            CliError::Refused(inner) => inner.exit_status(),
            CliError::CheckFailed { .. }
            | CliError::RecordJobId { .. }
            | CliError::Sbatch { .. }
            | CliError::Slurm(_)
            | CliError::Allocation(_)
            | CliError::Addr(_)
            | CliError::Route(_)
            | CliError::Agent(_)
            | CliError::PlanJson(_)
            | CliError::System { .. }
            | CliError::Output(_) => ExitStatus::Failure,
        }
    }

    /// How many errors this is: one per problem of a plan or sweep, else one.
    fn count(&self) -> usize {
        match self {
            CliError::Plan(e) => e.problems.len().max(1),
            CliError::Sweep(problems) => problems.len().max(1),
            CliError::Refused(inner) => inner.count(),
            _ => 1,
        }
    }

    /// `herd submit`/`herd check` stopped by this error before writing anything: the error
    /// as [`CliError::Refused`], which says so (a failed check says so already; output that
    /// could not be written is no refusal).
    pub(crate) fn refused(self) -> CliError {
        match self {
            CliError::CheckFailed { .. } | CliError::Refused(_) | CliError::Output(_) => self,
            other => CliError::Refused(Box::new(other)),
        }
    }

    /// What `herd` prints on stderr for this error, without the trailing newline: the
    /// message, then each source whose text the message does not already contain (most
    /// library messages include their source).
    pub fn report(&self) -> String {
        let mut text = match self {
            // The findings are printed; this is their summary line, as before.
            CliError::CheckFailed { .. } => format!("herd: {self}"),
            CliError::Refused(inner) => {
                let errors = inner.count();
                return format!(
                    "{}\nherd: {errors} error{}: nothing written, nothing submitted",
                    inner.report(),
                    if errors == 1 { "" } else { "s" }
                );
            }
            // One line per problem, each an error of its own (the source is these lines).
            CliError::Plan(e) => {
                return e
                    .problems
                    .iter()
                    .map(|p| format!("herd: error: {p}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            }
            _ => format!("herd: error: {self}"),
        };
        let mut source = std::error::Error::source(self);
        while let Some(s) = source {
            let said = s.to_string();
            if !text.contains(&said) {
                text.push_str(": ");
                text.push_str(&said);
            }
            source = s.source();
        }
        text
    }
}

/// Writes `bytes` to `path` through a temporary file beside it and a rename: a failed run
/// leaves the old file or none, never half a file.
pub(crate) fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> Result<(), CliError> {
    let name = path
        .file_name()
        .map_or_else(|| "out".into(), |n| n.to_string_lossy().into_owned());
    let tmp = path.with_file_name(format!(".{name}.tmp-{}", std::process::id()));
    let fail = CliError::system(format!("cannot write {}", path.display()));
    let result = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    if let Err(e) = result {
        // Best effort: the temporary file may not exist.
        std::fs::remove_file(&tmp).ok();
        return Err(fail(e));
    }
    Ok(())
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
    Status(status::StatusArgs),
    /// Per-rank logs of an experiment, by attempt.
    Logs(logs::LogsArgs),
    /// Cancel jobs by experiment name, job name or id (`--chain`: and the jobs waiting on
    /// them).
    Cancel(cancel::CancelArgs),
    /// Live view of a running job: per-rank state, step, throughput, loss, stragglers, and
    /// each rank's GPU (utilisation, memory, power; idle, throttled or nearly full ones
    /// flagged).
    Top(top::TopArgs),
    /// The scaling table of runs of one job at different sizes and each one's goodput
    /// (where its time went, what each fault cost, how often to checkpoint) and GPU use;
    /// `--plots DIR`: loss and throughput per rank, utilisation and memory per GPU (PNG,
    /// SVG); `--html FILE`: one self-contained page.
    Report(report::ReportArgs),
    /// Nodes blamed in your record of bad nodes (lost, frozen, failing), with SLURM's state
    /// of each now; `herd submit` leaves them out for `--avoid-bad-nodes` (default 24h).
    Nodes(nodes::NodesArgs),
    /// Check a job before queueing it: the CPUs each worker gets, and findings that each
    /// name the key to change.
    Check(submit::CheckArgs),
    /// Expand, compress and count SLURM hostlist expressions.
    Hostlist(hostlist::HostlistArgs),
    /// Print where this SLURM task sits (nodes, master, ranks) and the variables herd gives
    /// a worker.
    Env(env::EnvArgs),
    /// Print a shell completion script: `source <(herd completions bash)`.
    Completions(completions::CompletionsArgs),
    /// Print the man page herd(1): `herd man > ~/.local/share/man/man1/herd.1`.
    Man(completions::ManArgs),
    /// Run a job's step (`srun …`) from its batch script, passing signals on, and exit 0 when
    /// the job finished although a replaced spare-node agent was ended (herd's batch
    /// scripts with spare nodes use it).
    #[command(hide = true)]
    Settle(settle::SettleArgs),
}

/// Run a parsed command line, writing its output to `out`.
pub fn run(cli: Cli, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    match cli.command {
        Command::Hostlist(args) => hostlist::run(args, out),
        Command::Env(args) => env::run(args, out),
        Command::Launch(args) => launch::launch(args),
        Command::Run(args) => launch::run(args),
        Command::Exec(args) => exec::run(args),
        Command::Check(args) => submit::run_check(args, out).map_err(CliError::refused),
        Command::Submit(args) if args.sweep_args().is_sweep() => sweep::run(&args, out),
        Command::Submit(args) if sweep::resume::applies(&args) => sweep::resume::run(&args, out),
        Command::Submit(args) => submit::run_submit(args, out),
        Command::Logs(args) => logs::run(args, out),
        Command::Status(args) if sweep::status::applies(&args) => {
            sweep::status::run_named(&args, out)
        }
        Command::Status(args) => status::run(args, out, &sweep::status::InFolders),
        Command::Cancel(args) => cancel::run(args, out),
        Command::Report(args) if sweep::report::applies(&args) => {
            sweep::report::run_named(&args, out)
        }
        Command::Report(args) => report::run(args, out),
        Command::Nodes(args) => nodes::run(args, out),
        Command::Top(args) => top::run(args, out),
        Command::Completions(args) => completions::completions(args, out),
        Command::Man(args) => completions::man(args, out),
        Command::Settle(args) => settle::run(args),
    }
}

/// What goes before clap's text of `err` so that its errors read as herd's
/// (`herd: error: unrecognized subcommand …`): `herd: ` before an error, nothing before help.
fn usage_prefix(err: &clap::Error) -> &'static str {
    if err.use_stderr() && err.render().to_string().starts_with("error:") {
        "herd: "
    } else {
        ""
    }
}

/// Parse `std::env::args_os`, run, report errors on stderr and return the process exit code.
pub fn main() -> std::process::ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // clap prints help/version to stdout (exit 0) and usage errors to stderr (exit 2),
            // those as `herd: error: …` like every other error, clap's tip and usage after.
            eprint!("{}", usage_prefix(&err));
            let _ = err.print();
            return std::process::ExitCode::from(if err.use_stderr() {
                ExitStatus::Usage.code()
            } else {
                ExitStatus::Success.code()
            });
        }
    };
    // Stdout itself, not its lock held for the whole run: an agent's threads write its
    // workers' output to it while the agent runs.
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout());
    let result = run(cli, &mut out);
    // Flushed also after an error: a dry run's script is printed before its check fails.
    let flushed = out.flush();
    let result = result.and_then(|status| {
        flushed?;
        Ok(status)
    });
    let status = match result {
        Ok(status) => status,
        // A closed pipe (`herd hostlist expand … | head`) is the reader's choice, not an error.
        Err(CliError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            ExitStatus::Success
        }
        Err(err) => {
            let _ = writeln!(std::io::stderr().lock(), "{}", err.report());
            err.exit_status()
        }
    };
    std::process::ExitCode::from(status.code())
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
    fn every_subcommand_parses_with_its_fewest_arguments() {
        let cmd = Cli::command();
        for sub in cmd.get_subcommands() {
            let name = sub.get_name().to_owned();
            // The fewest arguments each command accepts.
            let rest: &[&str] = match name.as_str() {
                "hostlist" => &["count", "x"],
                "run" | "launch" | "exec" | "settle" => &["--", "true"],
                "submit" | "check" => &[],
                "cancel" => &["x"],
                "logs" => &["NAME"],
                "report" | "top" => &["NAME"],
                "completions" => &["bash"],
                _ => &[],
            };
            let mut argv = vec!["herd", name.as_str()];
            argv.extend(rest);
            Cli::try_parse_from(argv)
                .unwrap_or_else(|e| panic!("`herd {name}` does not parse: {e}"));
        }
    }

    /// What `herd ARGS` fails with (it must fail: a command that got this far would write).
    fn refusal(args: &[&str]) -> CliError {
        let cli = Cli::try_parse_from(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        match run(cli, &mut Vec::new()) {
            Ok(status) => panic!("{args:?} was not refused: {status:?}"),
            Err(e) => e,
        }
    }

    /// Each staying-alive refusal of `herd submit` and `herd check`: exit 2 (the plan does
    /// not resolve), its message, then what was not written.
    fn refused_as_usage(flags: &[&str], says: &str) {
        let root = tempfile::tempdir().expect("tempdir");
        let exp_root = root.path().join("exps");
        let exp_root = exp_root.to_str().expect("utf-8");
        for command in [&["herd", "submit", "--dry-run"][..], &["herd", "check"]] {
            let mut args = command.to_vec();
            args.extend(["-J", "keep", "--exp-root", exp_root]);
            args.extend(flags);
            args.extend(["--", "true"]);
            let err = refusal(&args);
            assert_eq!(err.exit_status(), ExitStatus::Usage, "{args:?}: {err}");
            let report = err.report();
            let lines: Vec<&str> = report.lines().collect();
            assert_eq!(lines.len(), 2, "{args:?}: {report}");
            assert!(
                lines[0].starts_with("herd: error: ") && lines[0].contains(says),
                "{args:?}: {report}"
            );
            assert_eq!(
                lines[1], "herd: 1 error: nothing written, nothing submitted",
                "{args:?}"
            );
        }
        assert!(!root.path().join("exps").exists(), "nothing written");
    }

    #[test]
    fn max_requeues_with_no_requeue_is_refused_with_exit_2_and_nothing_written() {
        refused_as_usage(
            &["--max-requeues", "2", "--no-requeue"],
            "2 requeues asked for, but `requeue = false` forbids them",
        );
    }

    #[test]
    fn stop_signal_kill_is_refused_with_exit_2_and_nothing_written() {
        refused_as_usage(
            &["--stop-signal", "KILL"],
            "`KILL` is not a signal a worker can checkpoint on",
        );
    }

    #[test]
    fn a_refusal_counts_each_problem_of_the_plan_once() {
        let err = refusal(&[
            "herd",
            "check",
            "-J",
            "keep",
            "--stop-signal",
            "KILL",
            "--max-requeues",
            "2",
            "--no-requeue",
            "--",
            "true",
        ]);
        let report = err.report();
        let lines: Vec<&str> = report.lines().collect();
        assert_eq!(lines.len(), 3, "{report}");
        assert!(
            lines[..2].iter().all(|l| l.starts_with("herd: error: ")),
            "{report}"
        );
        assert_eq!(
            lines[2],
            "herd: 2 errors: nothing written, nothing submitted"
        );
        assert_eq!(err.exit_status(), ExitStatus::Usage);
    }

    #[test]
    fn a_failed_check_is_not_wrapped_twice() {
        let failed = CliError::CheckFailed { errors: 3 }.refused();
        assert!(matches!(failed, CliError::CheckFailed { errors: 3 }));
        assert_eq!(failed.exit_status(), ExitStatus::Failure);
    }

    #[test]
    fn clap_errors_read_as_herds_and_keep_their_tips() {
        let err = Cli::try_parse_from(["herd", "stauts"]).expect_err("no such command");
        let text = format!("{}{}", usage_prefix(&err), err.render());
        assert!(
            text.starts_with("herd: error: unrecognized subcommand 'stauts'"),
            "{text}"
        );
        assert!(
            text.contains("a similar subcommand exists: 'status'"),
            "{text}"
        );
        assert!(err.use_stderr(), "an error: exit 2");
        let err = Cli::try_parse_from(["herd", "status", "--wach"]).expect_err("no such flag");
        assert_eq!(usage_prefix(&err), "herd: ");
        // Help (asked for, or shown for a missing command) is no error message.
        for args in [&["herd", "--help"][..], &["herd"], &["herd", "hostlist"]] {
            let err = Cli::try_parse_from(args).expect_err("help");
            assert_eq!(usage_prefix(&err), "", "{args:?}: {}", err.render());
        }
    }

    fn disk_full(path: &str) -> herd_exp::Error {
        herd_exp::Error::Io {
            action: "cannot write",
            path: path.into(),
            source: std::io::Error::from_raw_os_error(28),
        }
    }

    #[test]
    fn experiment_errors_exit_by_kind() {
        let exit = |e: herd_exp::Error| CliError::from(e).exit_status();
        assert_eq!(exit(disk_full("/e/x")), ExitStatus::Failure);
        let name = herd_exp::validate_name("a/b").expect_err("not a name");
        assert_eq!(exit(name.into()), ExitStatus::Usage);
        for path in [
            herd_exp::Error::NotFound {
                path: "/e/x".into(),
            },
            herd_exp::Error::ExpRootIsProject { path: "/p".into() },
        ] {
            assert_eq!(exit(path), ExitStatus::Usage);
        }
        assert_eq!(
            exit(herd_exp::Error::AlreadyExists {
                path: "/e/x".into()
            }),
            ExitStatus::Failure,
            "as when submit's check finds the folder"
        );
    }

    #[test]
    fn report_says_each_cause_once_and_keeps_the_sources() {
        let err = CliError::from(disk_full("/e/.herd-new-1/x"));
        assert_eq!(
            err.report(),
            "herd: error: cannot write /e/.herd-new-1/x: No space left on device (os error 28)"
        );
        let exp = std::error::Error::source(&err)
            .and_then(|s| s.downcast_ref::<herd_exp::Error>())
            .expect("the experiment error is the source");
        let io = std::error::Error::source(exp)
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .expect("and its source the OS error");
        assert_eq!(io.raw_os_error(), Some(28));

        // A cause the message does not name is added.
        #[derive(Debug, thiserror::Error)]
        #[error("outer")]
        struct Outer(#[source] Inner);
        #[derive(Debug, thiserror::Error)]
        #[error("inner detail")]
        struct Inner;
        let err = CliError::System {
            action: "cannot start".into(),
            source: std::io::Error::other(Outer(Inner)),
        };
        assert_eq!(
            err.report(),
            "herd: error: cannot start: outer: inner detail"
        );

        let failed = CliError::CheckFailed { errors: 2 };
        assert_eq!(failed.exit_status(), ExitStatus::Failure);
        assert_eq!(
            failed.report(),
            "herd: 2 errors: nothing written, nothing submitted"
        );
    }
}
