//! `herd check` and `herd submit`: a job file, flags and cluster profiles resolved into one
//! plan, checked (docs/design.md §5), and — for submit — an experiment folder and an sbatch.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::Args;
use herd_plan::{
    check, cpus_line, format_rank_table, parse_param, rank_table, render_script, resolve,
    CheckContext, Finding, JobFile, JobKeys, Key, MemoryPolicy, Plan, PlanArgs, ProgramLookup,
    ScriptParams, Severity, Source,
};

use herd_slurm::scheduler::partition::{self, Partition};

pub(crate) use crate::after::dependency;
use crate::site::{cluster_profiles, hostname};
use crate::{CliError, ExitStatus};

/// The working folder: the project `herd submit` snapshots.
pub(crate) fn working_folder() -> Result<PathBuf, CliError> {
    std::env::current_dir().map_err(CliError::system("cannot find the working folder"))
}

/// This herd binary, as the batch script runs it.
fn herd_binary() -> Result<PathBuf, CliError> {
    std::env::current_exe().map_err(CliError::system("cannot find the herd binary's path"))
}

/// Resolve the plan from a job file, flags and the matching cluster profile.
pub fn plan(args: &PlanArgs) -> Result<Plan, CliError> {
    let job = match &args.job {
        Some(path) => Some(JobFile::load(path)?),
        None => None,
    };
    plan_with(job.as_ref(), &args.flags)
}

/// [`plan`] from a job file already read.
pub(crate) fn plan_with(job: Option<&JobFile>, flags: &JobKeys) -> Result<Plan, CliError> {
    let profiles = cluster_profiles()?;
    for p in flags.params.iter().flatten() {
        parse_param(p).map_err(|source| CliError::Param {
            arg: p.clone(),
            source,
        })?;
    }
    let mut plan = resolve(job, flags, &profiles, &hostname())?;
    if plan.exp_root.is_relative() {
        let cwd = working_folder()?;
        plan.exp_root = cwd.join(&plan.exp_root);
    }
    Ok(plan)
}

/// The cluster's partitions with their node sizes, when `scontrol` answers (and `sinfo`,
/// for the node sizes); `None` otherwise, with a note unless SLURM is not installed here.
fn partitions() -> Option<Vec<Partition>> {
    let note =
        |what: &str, e: &dyn std::fmt::Display| eprintln!("herd: note: {what} not checked: {e}");
    match partition::query() {
        Ok(table) => {
            if let Some(e) = &table.node_sizes_unknown {
                note("node sizes", e);
            }
            Some(table.partitions)
        }
        Err(e) if e.is_not_installed() => None,
        Err(e) => {
            note("partitions", &e);
            None
        }
    }
}

/// Everything `check` and `submit` compute before writing anything.
pub struct Checked {
    /// The plan.
    pub plan: Plan,
    /// The experiment folder it would create.
    pub exp_dir: PathBuf,
    /// The rendered batch script.
    pub script: String,
    /// `--dependency`, resolved.
    pub dependency: Option<String>,
    /// Every finding.
    pub findings: Vec<Finding>,
    /// The name the job would have had by default (its script's), when an experiment of
    /// that name exists and the plan got the next free one ([`free_default_name`]).
    pub taken: Option<String>,
}

/// A job named by default (no `--job-name`, no `job_name` in a file, so after its job file
/// or script) gets the first free name of `NAME`, `NAME-2`, `NAME-3`, … under its
/// experiment root, so submitting the same script twice makes two experiments. Returns the
/// default name when it was taken. A name given is kept (and refused if taken).
pub(crate) fn free_default_name(plan: &mut Plan) -> Option<String> {
    if plan.source(Key::JobName) != Some(&Source::Default) {
        return None;
    }
    let free = herd_exp::next_free_name(&plan.exp_root, &plan.job_name, herd_plan::MAX_JOB_NAME);
    (free != plan.job_name).then(|| std::mem::replace(&mut plan.job_name, free))
}

/// The note for a job that got the next free name instead of its default one.
pub(crate) fn taken_note(taken: &str, plan: &Plan) -> String {
    format!(
        "herd: {} exists, so this job is named {} (give --job-name NAME to choose)",
        plan.exp_root.join(taken).display(),
        plan.job_name
    )
}

/// What the checks learn from this machine and the cluster once, whatever they check: the
/// herd binary, the project, the partitions, `PATH`.
pub(crate) struct Site {
    /// This herd binary, as the batch script runs it.
    pub(crate) herd: PathBuf,
    /// The project (the working folder).
    pub(crate) project: PathBuf,
    /// The partitions, when `scontrol` answers.
    partitions: Option<Vec<Partition>>,
    /// `PATH`'s folders.
    path: Vec<PathBuf>,
}

impl Site {
    /// Looks everything up (one `scontrol` and one `sinfo` call).
    pub(crate) fn query() -> Result<Site, CliError> {
        Ok(Site {
            herd: herd_binary()?,
            project: working_folder()?,
            partitions: partitions(),
            path: std::env::var_os("PATH")
                .map(|p| std::env::split_paths(&p).collect())
                .unwrap_or_default(),
        })
    }
}

/// Render `plan`'s batch script for the experiment folder `exp_dir` and check both.
pub(crate) fn render_and_check(
    plan: &Plan,
    exp_dir: &Path,
    dependency: Option<&str>,
    site: &Site,
) -> Result<(String, Vec<Finding>), CliError> {
    let script = render_script(
        plan,
        &ScriptParams {
            exp_dir,
            herd: &site.herd,
            dependency,
        },
    )?;
    let exists = |p: &Path| p.is_file();
    let executable = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let findings = check(
        plan,
        &CheckContext {
            memory: MemoryPolicy::default(),
            partitions: site.partitions.as_deref(),
            programs: Some(ProgramLookup {
                snapshot: &site.project,
                path: &site.path,
                exists: &exists,
                executable: &executable,
            }),
            script: Some(&script),
        },
    );
    Ok((script, findings))
}

/// A finding of `herd submit` itself (not of the plan's checks): an error.
pub(crate) fn submit_error(message: String) -> Finding {
    Finding {
        severity: Severity::Error,
        code: "submit",
        keys: Vec::new(),
        message,
    }
}

/// Resolve, render and check: the work `herd check` shows and `herd submit` starts with.
pub fn prepare(args: &PlanArgs, resume: bool) -> Result<Checked, CliError> {
    let mut plan = plan(args)?;
    crate::nodes::avoid_bad_nodes(&mut plan);
    let taken = if resume {
        None
    } else {
        free_default_name(&mut plan)
    };
    let exp_dir =
        herd_exp::experiment_dir(&plan.exp_root, &plan.job_name).map_err(herd_exp::Error::from)?;
    let site = Site::query()?;
    let mut extra = Vec::new();
    let dependency = match dependency(&plan.after) {
        Ok(d) => d,
        Err(problems) => {
            extra.extend(problems);
            None
        }
    };
    let (script, mut findings) = render_and_check(&plan, &exp_dir, dependency.as_deref(), &site)?;
    if !resume && exp_dir.exists() {
        extra.push(format!(
            "experiment folder {} exists and is never overwritten: choose another `job_name` (--job-name), or submit it again with `herd submit --resume {}`",
            exp_dir.display(),
            plan.job_name
        ));
    }
    findings.extend(extra.into_iter().map(submit_error));
    Ok(Checked {
        plan,
        exp_dir,
        script,
        dependency,
        findings,
        taken,
    })
}

/// Print every finding on stderr; [`CliError::CheckFailed`] if any is an error, else
/// `check passed` on `out`.
pub(crate) fn report(findings: &[Finding], out: &mut dyn Write) -> Result<(), CliError> {
    let errors = findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .count();
    for f in findings {
        eprintln!("herd: {f}");
    }
    if errors > 0 {
        return Err(CliError::CheckFailed { errors });
    }
    let warnings = findings.len();
    writeln!(
        out,
        "check passed ({warnings} warning{})",
        if warnings == 1 { "" } else { "s" }
    )?;
    Ok(())
}

/// `herd check` arguments.
#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    plan: PlanArgs,
    /// Print a complete, commented cluster profile (every key a profile may hold) to start
    /// yours from, and check nothing: `herd check --example-profile >
    /// ~/.config/herd/profiles/10-mycluster.toml` (docs/submit.md, "A cluster profile").
    #[arg(long, exclusive = true)]
    example_profile: bool,
}

/// Run `herd check`.
pub fn run_check(args: CheckArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    if args.example_profile {
        out.write_all(herd_plan::EXAMPLE_PROFILE.as_bytes())?;
        return Ok(ExitStatus::Success);
    }
    let checked = prepare(&args.plan, false)?;
    writeln!(out, "{}", cpus_line(&checked.plan))?;
    // The release the job would run on: what differs between releases is in docs/slurm.md.
    match herd_slurm::scheduler::version::detect() {
        Ok(Some(v)) => writeln!(out, "Slurm {v} (scontrol --version)")?,
        Ok(None) => {}
        Err(e) => eprintln!("herd: note: Slurm version not known: {e}"),
    }
    report(&checked.findings, out)?;
    Ok(ExitStatus::Success)
}

/// The sweep flags of `herd submit` (docs/sweeps.md).
#[derive(Debug, Clone, Default, Args)]
pub struct SweepArgs {
    /// Run the job once for each value of KEY, as one SLURM array job, each run an
    /// experiment of its own inside the sweep's folder; `{KEY}` in the command takes the
    /// run's value. A KEY named after a plan key (`nodes=1,2`, `gpus_per_node`, `time`,
    /// `mem`, `partition`…) sets that key of each run, as its flag would: runs that then ask
    /// for other resources go to another array job, one per resource shape. Repeatable: the
    /// runs are every combination, the first key varying slowest (docs/sweeps.md).
    #[arg(long, value_name = "KEY=V1,V2,…", conflicts_with_all = ["resume", "then"])]
    pub(crate) sweep: Vec<String>,
    /// A sweep file (TOML): a `[grid]` table of `KEY = [values]` and/or `[[runs]]`, each one
    /// run's values; its keys come before those of --sweep.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["resume", "then"])]
    pub(crate) sweep_file: Option<PathBuf>,
    /// A sweep's runs at most P at once (`--array=…%P`; in each array job when its runs
    /// have several resource shapes).
    #[arg(long, value_name = "P")]
    pub(crate) max_parallel: Option<u32>,
}

impl SweepArgs {
    /// Whether a sweep is asked for.
    pub(crate) fn is_sweep(&self) -> bool {
        !self.sweep.is_empty() || self.sweep_file.is_some()
    }
}

/// `herd submit` arguments.
#[derive(Debug, Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    plan: PlanArgs,
    #[command(flatten)]
    sweep: SweepArgs,
    /// Print the batch script and the per-rank table; write and submit nothing.
    #[arg(long)]
    dry_run: bool,
    /// Submit the existing experiment NAME again as a new attempt (same folder, same
    /// snapshot and script); other plan options are not used. A sweep's NAME: its runs that
    /// failed or were cancelled, as one array job per resource shape (`SWEEP/RUN`: that run
    /// alone).
    #[arg(long, value_name = "NAME", conflicts_with_all = ["dry_run", "then"])]
    resume: Option<String>,
    /// Then submit this job file to start after the first one succeeds (a chain; repeatable,
    /// each waits for the one before). Every plan is checked before anything is written.
    #[arg(long, value_name = "JOB.toml")]
    then: Vec<PathBuf>,
    /// Then watch the job (every job of a chain) with a live line on stderr until it ends,
    /// and exit with its exit code. Ctrl-C stops watching, never the job.
    #[arg(long, conflicts_with = "dry_run")]
    wait: bool,
}

impl SubmitArgs {
    /// The sweep flags.
    pub(crate) fn sweep_args(&self) -> &SweepArgs {
        &self.sweep
    }

    /// The job file and the keys as flags.
    pub(crate) fn plan_args(&self) -> &PlanArgs {
        &self.plan
    }

    /// `--dry-run`.
    pub(crate) fn dry_run(&self) -> bool {
        self.dry_run
    }

    /// `--wait`.
    pub(crate) fn wait(&self) -> bool {
        self.wait
    }
}

/// Create the experiment folder for a checked plan and sbatch its script; returns the id
/// and the experiment.
fn create_and_submit(checked: &Checked) -> Result<(String, herd_exp::Experiment), CliError> {
    let plan = &checked.plan;
    let project = working_folder()?;
    let plan_json = serde_json::to_value(plan).map_err(CliError::PlanJson)?;
    let created = herd_exp::NewExperiment {
        exp_root: plan.exp_root.clone(),
        name: plan.job_name.clone(),
        project_root: project,
        plan: plan_json,
        invocation: herd_exp::Invocation::current(env!("CARGO_PKG_VERSION")),
        snapshot: herd_exp::SnapshotOptions {
            exclude: plan.exclude.clone(),
            ..herd_exp::SnapshotOptions::default()
        },
        files: vec![herd_exp::ExtraFile {
            name: herd_exp::ExperimentDir::job_script_name().into(),
            contents: checked.script.clone().into_bytes(),
            executable: true,
        }],
    }
    .create()?;
    let exp = &created.experiment;
    let snap = &created.snapshot;
    let linked = match (&snap.linked_from, snap.linked) {
        (Some(from), n) if n > 0 => format!(", {n} unchanged since {from} (linked)"),
        _ => String::new(),
    };
    eprintln!(
        "herd: code snapshot in {}: {} file{}, {:.1} MB, {} copied{linked} in {:.0} ms",
        exp.paths().code().display(),
        snap.files,
        if snap.files == 1 { "" } else { "s" },
        snap.bytes as f64 / 1e6,
        snap.copied,
        snap.elapsed.as_secs_f64() * 1e3
    );
    let said = [
        crate::snapshot_lines::left_out_line(&snap.herd_outputs),
        crate::snapshot_lines::envs_line(&snap.python_envs),
        crate::snapshot_lines::size_line(snap),
    ];
    for line in said.into_iter().flatten() {
        eprintln!("{line}");
    }
    for warning in &snap.warnings {
        eprintln!("herd: warning: snapshot: {warning}");
    }
    match sbatch(exp) {
        Ok(id) => {
            exp.record_job_id(1, &id)
                .map_err(|source| CliError::RecordJobId {
                    job_id: id.clone(),
                    source,
                })?;
            record_queued(exp, 1, &id);
            eprintln!(
                "herd: submitted job {id} ({}): experiment {}",
                plan.job_name,
                exp.dir().display()
            );
            Ok((id, exp.clone()))
        }
        Err(why) => {
            // Nothing ran from this folder: remove it, so the same name can be used again.
            let _ = std::fs::remove_dir_all(exp.dir());
            Err(CliError::Sbatch {
                what: "the job, so no experiment folder was kept".into(),
                source: why,
            })
        }
    }
}

/// The `queued` event of submission `submission` in the experiment's timeline, and the
/// Slurm release it went to in the manifest; the job is queued either way, so what cannot
/// be written is only said.
pub(crate) fn record_queued(exp: &herd_exp::Experiment, submission: u32, job_id: &str) {
    if let Ok(Some(version)) = herd_slurm::scheduler::version::detect() {
        if let Err(e) = exp.record_slurm_version(submission, &version.to_string()) {
            eprintln!("herd: warning: cannot record the Slurm version of job {job_id}: {e}");
        }
    }
    let queued = herd_exp::timeline::Queued {
        submission,
        job_id: Some(job_id.into()),
    };
    if let Err(e) = herd_exp::timeline::append(exp.dir(), queued) {
        eprintln!(
            "herd: warning: cannot write {}: {e}",
            exp.paths().timeline().display()
        );
    }
}

/// A sweep's run queued as array task `task`: its submission (`submission` makes it: the
/// first, or a new one for a resume) gets that job id and a `queued` event. The task is
/// queued whatever happens here, so the first failure is kept in `unrecorded` and the other
/// runs are recorded all the same.
pub(crate) fn record_task(
    exp: &herd_exp::Experiment,
    submission: impl FnOnce() -> Result<u32, herd_exp::Error>,
    task: String,
    unrecorded: &mut Option<CliError>,
) {
    let recorded = submission().and_then(|n| {
        exp.record_job_id(n, &task)?;
        Ok(n)
    });
    match recorded {
        Ok(n) => record_queued(exp, n, &task),
        Err(source) => {
            unrecorded.get_or_insert(CliError::RecordJobId {
                job_id: task,
                source,
            });
        }
    }
}

/// `sbatch --parsable` the experiment's script from its folder; the job id or why not.
fn sbatch(exp: &herd_exp::Experiment) -> Result<String, herd_slurm::SlurmError> {
    herd_slurm::scheduler::command::sbatch(&exp.paths().job_script(), exp.dir())
}

/// [`create_and_submit`]; a job named by default whose free name another submit took
/// meanwhile is checked again under the next free one (a few times at most).
fn create_named(
    mut checked: Checked,
    args: &PlanArgs,
) -> Result<(String, herd_exp::Experiment), CliError> {
    for _ in 0..4 {
        match create_and_submit(&checked) {
            Err(CliError::Experiment(herd_exp::Error::AlreadyExists { .. }))
                if checked.plan.source(Key::JobName) == Some(&Source::Default) =>
            {
                checked = prepare(args, false)?;
                report(&checked.findings, &mut std::io::sink())?;
                if let Some(taken) = &checked.taken {
                    eprintln!("{}", taken_note(taken, &checked.plan));
                }
            }
            done => return done,
        }
    }
    create_and_submit(&checked)
}

/// `herd submit --resume NAME`: a new submission of an existing experiment.
fn resume(args: &SubmitArgs, name: &str, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    let exp_root =
        crate::site::exp_root(args.plan.flags.exp_root.as_deref()).map_err(CliError::refused)?;
    let exp =
        crate::site::open_experiment(&exp_root, name).map_err(|e| CliError::from(e).refused())?;
    let submission =
        exp.add_submission(&herd_exp::Invocation::current(env!("CARGO_PKG_VERSION")))?;
    let id = sbatch(&exp).map_err(|source| CliError::Sbatch {
        what: format!("submission {submission} of {name}"),
        source,
    })?;
    exp.record_job_id(submission, &id)
        .map_err(|source| CliError::RecordJobId {
            job_id: id.clone(),
            source,
        })?;
    record_queued(&exp, submission, &id);
    writeln!(out, "{id}")?;
    // Its first start is the experiment's next attempt (attempts count over the whole
    // experiment), unless a job of an earlier submission still runs and starts one first.
    let logs = exp.paths().logs();
    let next = logs.next_attempt();
    eprintln!(
        "herd: submitted job {id}: submission {submission} of experiment {}; its workers start as attempt {next} ({})",
        exp.dir().display(),
        logs.attempt(next).path().display()
    );
    if args.wait {
        return wait(&mut [crate::status::Watched::new(Some(exp), id)], out);
    }
    Ok(ExitStatus::Success)
}

impl SubmitArgs {
    /// `--resume NAME`'s name, with the experiment root it is under.
    pub fn resumes(&self) -> Option<(&str, Result<std::path::PathBuf, CliError>)> {
        let name = self.resume.as_deref()?;
        Some((
            name,
            crate::site::exp_root(self.plan.flags.exp_root.as_deref()),
        ))
    }

    /// `--wait`.
    pub fn waits(&self) -> bool {
        self.wait
    }
}

/// Run `herd submit`.
pub fn run_submit(args: SubmitArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    if let Some(p) = args.sweep.max_parallel {
        return Err(CliError::Usage(format!(
            "--max-parallel {p} limits a sweep's runs at once: give --sweep KEY=V1,V2 or --sweep-file FILE, or drop --max-parallel"
        ))
        .refused());
    }
    if let Some(name) = &args.resume {
        return resume(&args, name, out);
    }
    let checked = prepare(&args.plan, false).map_err(CliError::refused)?;
    if let Some(taken) = &checked.taken {
        eprintln!("{}", taken_note(taken, &checked.plan));
    }
    if args.dry_run {
        writeln!(out, "{}", checked.script.trim_end())?;
        writeln!(out)?;
        write!(out, "{}", format_rank_table(&rank_table(&checked.plan)))?;
        writeln!(out, "{}", cpus_line(&checked.plan))?;
        writeln!(
            out,
            "experiment folder (not created): {}",
            checked.exp_dir.display()
        )?;
        report(&checked.findings, &mut std::io::sink())?;
        return Ok(ExitStatus::Success);
    }
    // Every job of a chain is checked before anything is written.
    let chain: Vec<PlanArgs> = args
        .then
        .iter()
        .map(|path| PlanArgs {
            job: Some(path.clone()),
            // Checked without its dependency: the job it waits for is submitted just
            // before it, and its id (checked with SLURM then) is known only after that sbatch.
            flags: JobKeys {
                exp_root: args.plan.flags.exp_root.clone(),
                ..JobKeys::default()
            },
        })
        .collect();
    let mut findings = checked.findings.clone();
    for next in &chain {
        findings.extend(prepare(next, false).map_err(CliError::refused)?.findings);
    }
    report(&findings, &mut std::io::sink())?;
    let (mut id, exp) = create_named(checked, &args.plan)?;
    writeln!(out, "{id}")?;
    let mut submitted = vec![crate::status::Watched::new(Some(exp), id.clone())];
    for mut next in chain {
        next.flags.after = Some(vec![format!("{id}:ok")]);
        let exp;
        (id, exp) = create_named(prepare(&next, false)?, &next)?;
        writeln!(out, "{id}")?;
        submitted.push(crate::status::Watched::new(Some(exp), id.clone()));
    }
    if args.wait {
        return wait(&mut submitted, out);
    }
    Ok(ExitStatus::Success)
}

/// `--wait`: the job ids are printed; the live line goes to stderr.
fn wait(jobs: &mut [crate::status::Watched], out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    use std::io::IsTerminal;
    out.flush()?;
    let stderr = std::io::stderr();
    let tty = stderr.is_terminal();
    crate::status::watch(jobs, crate::site::DEFAULT_TIMEOUT, &mut stderr.lock(), tty)
}
