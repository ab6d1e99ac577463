//! `herd check` and `herd submit`: a job file, flags and cluster profiles resolved into one
//! plan, checked (docs/design.md §5), and — for submit — an experiment folder and an sbatch.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Args;
use herd_plan::{
    check, format_rank_table, load_profiles, parse_param, profile_dir, rank_table, render_script,
    resolve, CheckContext, Finding, JobFile, JobKeys, MemoryPolicy, Plan, PlanArgs, ProgramLookup,
    ScriptParams, Severity,
};

use crate::{CliError, ExitStatus};

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default()
}

/// Resolve the plan from a job file, flags and the matching cluster profile.
pub fn plan(args: &PlanArgs) -> Result<Plan, CliError> {
    let job = match &args.job {
        Some(path) => Some(JobFile::load(path).map_err(|e| CliError::Input(e.to_string()))?),
        None => None,
    };
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let xdg = std::env::var_os("XDG_CONFIG_HOME").map(PathBuf::from);
    let profiles = load_profiles(&profile_dir(xdg.as_deref(), &home))
        .map_err(|e| CliError::Input(e.to_string()))?;
    for p in args.flags.params.iter().flatten() {
        parse_param(p).map_err(|e| CliError::Usage(format!("--param {p:?}: {e}")))?;
    }
    let mut plan = resolve(job.as_ref(), &args.flags, &profiles, &hostname())
        .map_err(|e| CliError::Input(e.to_string()))?;
    if plan.exp_root.is_relative() {
        let cwd = std::env::current_dir().map_err(CliError::Io)?;
        plan.exp_root = cwd.join(&plan.exp_root);
    }
    Ok(plan)
}

/// The cluster's partitions, when `scontrol` answers; `None` (with a note) otherwise.
fn partitions() -> Option<Vec<herd_plan::Partition>> {
    let out = Command::new("scontrol")
        .args(["show", "partition", "-o"])
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    match herd_plan::parse_scontrol_partitions(&String::from_utf8_lossy(&out.stdout)) {
        Ok(p) => Some(p),
        Err(e) => {
            eprintln!("herd: note: partitions not checked: {e}");
            None
        }
    }
}

/// Resolve `after` entries (`NAME|ID[:ok|any|notok]`) into sbatch's `--dependency`, with one
/// squeue query. A name that matches no job or several is a finding listing the candidates.
pub fn dependency(after: &[String]) -> Result<Option<String>, Vec<String>> {
    if after.is_empty() {
        return Ok(None);
    }
    let jobs: Vec<(String, String)> = Command::new("squeue")
        .args(["-h", "--me", "-o", "%i|%j"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter_map(|l| l.split_once('|'))
                .map(|(i, n)| (i.trim().to_owned(), n.trim().to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let mut problems = Vec::new();
    let mut by_kind: Vec<(&str, Vec<String>)> = Vec::new();
    for entry in after {
        let (target, kind) = match entry.rsplit_once(':') {
            Some((t, k @ ("ok" | "any" | "notok"))) => (t, k),
            _ => (entry.as_str(), "ok"),
        };
        let ids: Vec<String> = if target.bytes().all(|b| b.is_ascii_digit()) && !target.is_empty() {
            vec![target.to_owned()]
        } else {
            jobs.iter()
                .filter(|(_, n)| n == target)
                .map(|(i, _)| i.clone())
                .collect()
        };
        match ids.len() {
            1 => {}
            0 => {
                let names: Vec<&str> = jobs.iter().map(|(_, n)| n.as_str()).collect();
                problems.push(format!(
                    "--after {entry}: no queued or running job of yours is named {target:?} (yours: {}); fix the name in `after`",
                    if names.is_empty() { "none".to_owned() } else { names.join(", ") }
                ));
                continue;
            }
            _ => {
                problems.push(format!(
                    "--after {entry}: {} jobs are named {target:?} (ids {}); give the id instead",
                    ids.len(),
                    ids.join(", ")
                ));
                continue;
            }
        }
        let slurm_kind = match kind {
            "any" => "afterany",
            "notok" => "afternotok",
            _ => "afterok",
        };
        match by_kind.iter_mut().find(|(k, _)| *k == slurm_kind) {
            Some((_, v)) => v.extend(ids),
            None => by_kind.push((slurm_kind, ids)),
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(Some(
        by_kind
            .iter()
            .map(|(k, ids)| format!("{k}:{}", ids.join(":")))
            .collect::<Vec<_>>()
            .join(","),
    ))
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
}

/// Resolve, render and check: the work `herd check` shows and `herd submit` starts with.
pub fn prepare(args: &PlanArgs, resume: bool) -> Result<Checked, CliError> {
    let plan = plan(args)?;
    let exp_dir = plan.exp_root.join(&plan.job_name);
    let herd = std::env::current_exe().map_err(CliError::Io)?;
    let project = std::env::current_dir().map_err(CliError::Io)?;
    let mut extra = Vec::new();
    let dependency = match dependency(&plan.after) {
        Ok(d) => d,
        Err(problems) => {
            extra.extend(problems);
            None
        }
    };
    let script = render_script(
        &plan,
        &ScriptParams {
            exp_dir: &exp_dir,
            snapshot_dir: &exp_dir.join("code"),
            herd: &herd,
            dependency: dependency.as_deref(),
        },
    )
    .map_err(|e| CliError::Input(e.to_string()))?;
    let parts = partitions();
    let path: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    let exists = |p: &Path| p.is_file();
    let mut findings = check(
        &plan,
        &CheckContext {
            memory: MemoryPolicy::default(),
            partitions: parts.as_deref(),
            programs: Some(ProgramLookup {
                snapshot: &project,
                path: &path,
                exists: &exists,
            }),
            script: Some(&script),
        },
    );
    if !resume && exp_dir.exists() {
        extra.push(format!(
            "experiment folder {} exists and is never overwritten: choose another `job_name` (--job-name), or add an attempt with `herd submit --resume {}`",
            exp_dir.display(),
            plan.job_name
        ));
    }
    for message in extra {
        findings.push(Finding {
            severity: Severity::Error,
            code: "submit",
            keys: Vec::new(),
            message,
        });
    }
    Ok(Checked {
        plan,
        exp_dir,
        script,
        dependency,
        findings,
    })
}

fn report(findings: &[Finding], out: &mut dyn Write) -> Result<bool, CliError> {
    let errors = findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .count();
    for f in findings {
        eprintln!("herd: {f}");
    }
    let warnings = findings.len() - errors;
    if errors == 0 {
        writeln!(
            out,
            "check passed ({warnings} warning{})",
            if warnings == 1 { "" } else { "s" }
        )?;
    } else {
        eprintln!(
            "herd: {errors} error{}: nothing written, nothing submitted",
            if errors == 1 { "" } else { "s" }
        );
    }
    Ok(errors == 0)
}

/// `herd check` arguments.
#[derive(Debug, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    plan: PlanArgs,
}

/// Run `herd check`.
pub fn run_check(args: CheckArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    let checked = prepare(&args.plan, false)?;
    Ok(if report(&checked.findings, out)? {
        ExitStatus::Success
    } else {
        ExitStatus::Failure
    })
}

/// `herd submit` arguments.
#[derive(Debug, Args)]
pub struct SubmitArgs {
    #[command(flatten)]
    plan: PlanArgs,
    /// Print the batch script and the per-rank table; write and submit nothing.
    #[arg(long)]
    dry_run: bool,
    /// Submit the existing experiment NAME again as a new attempt (same folder, same
    /// snapshot and script); other plan options are not used.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["dry_run", "then"])]
    resume: Option<String>,
    /// Then submit this job file to start after the first one succeeds (a chain; repeatable,
    /// each waits for the one before). Every plan is checked before anything is written.
    #[arg(long, value_name = "JOB.toml")]
    then: Vec<PathBuf>,
}

/// Create the experiment folder for a checked plan and sbatch its script; returns the id.
fn create_and_submit(checked: &Checked) -> Result<String, CliError> {
    let plan = &checked.plan;
    let project = std::env::current_dir().map_err(CliError::Io)?;
    let plan_json = serde_json::to_value(plan).map_err(|e| CliError::Launch(e.to_string()))?;
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
            name: "job.sbatch".into(),
            contents: checked.script.clone().into_bytes(),
            executable: true,
        }],
    }
    .create()
    .map_err(|e| CliError::Input(e.to_string()))?;
    let exp = &created.experiment;
    let snap = &created.snapshot;
    let linked = match (&snap.linked_from, snap.linked) {
        (Some(from), n) if n > 0 => format!(", {n} unchanged since {from} (linked)"),
        _ => String::new(),
    };
    eprintln!(
        "herd: code snapshot in {}: {} files, {:.1} MB, {} copied{linked} in {:.0} ms",
        exp.code_dir().display(),
        snap.files,
        snap.bytes as f64 / 1e6,
        snap.copied,
        snap.elapsed.as_secs_f64() * 1e3
    );
    for warning in &snap.warnings {
        eprintln!("herd: warning: snapshot: {warning}");
    }
    match sbatch(exp) {
        Ok(id) => {
            exp.record_job_id(1, &id).map_err(|e| {
                CliError::Launch(format!(
                    "job {id} submitted, but its id could not be recorded: {e}"
                ))
            })?;
            eprintln!(
                "herd: submitted job {id} ({}): experiment {}",
                plan.job_name,
                exp.dir().display()
            );
            Ok(id)
        }
        Err(why) => {
            // Nothing ran from this folder: remove it, so the same name can be used again.
            let _ = std::fs::remove_dir_all(exp.dir());
            Err(CliError::Launch(format!(
                "sbatch refused the job, so no experiment folder was kept: {why}"
            )))
        }
    }
}

/// `sbatch --parsable` the experiment's script from its folder; the job id or why not.
/// (The script changes to `code/` itself, once it has made it.)
fn sbatch(exp: &herd_exp::Experiment) -> Result<String, String> {
    let out = Command::new("sbatch")
        .arg("--parsable")
        .arg(exp.dir().join("job.sbatch"))
        .current_dir(exp.dir())
        .output()
        .map_err(|e| format!("cannot run sbatch: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_owned());
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let id = text.trim().split(';').next().unwrap_or_default().to_owned();
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("unexpected sbatch output {:?}", text.trim()));
    }
    Ok(id)
}

/// `--exp-root` as given, or the default one submit uses (relative to the working folder).
fn exp_root_or_default(given: Option<&Path>) -> PathBuf {
    given.map_or_else(
        || PathBuf::from(herd_plan::DEFAULT_EXP_ROOT),
        Path::to_path_buf,
    )
}

/// `herd submit --resume NAME`: a new attempt of an existing experiment.
fn resume(args: &SubmitArgs, name: &str, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    let exp_root = exp_root_or_default(args.plan.flags.exp_root.as_deref());
    let exp =
        herd_exp::Experiment::open(&exp_root, name).map_err(|e| CliError::Input(e.to_string()))?;
    let attempt = exp
        .add_attempt(&herd_exp::Invocation::current(env!("CARGO_PKG_VERSION")))
        .map_err(|e| CliError::Input(e.to_string()))?;
    let id = sbatch(&exp).map_err(|why| {
        CliError::Launch(format!("sbatch refused attempt {attempt} of {name}: {why}"))
    })?;
    exp.record_job_id(attempt, &id).map_err(|e| {
        CliError::Launch(format!(
            "job {id} submitted, but its id could not be recorded: {e}"
        ))
    })?;
    writeln!(out, "{id}")?;
    eprintln!(
        "herd: submitted job {id}: attempt {attempt} of experiment {}",
        exp.dir().display()
    );
    Ok(ExitStatus::Success)
}

/// Run `herd submit`.
pub fn run_submit(args: SubmitArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    if let Some(name) = &args.resume {
        return resume(&args, name, out);
    }
    let checked = prepare(&args.plan, false)?;
    if args.dry_run {
        writeln!(out, "{}", checked.script.trim_end())?;
        writeln!(out)?;
        write!(out, "{}", format_rank_table(&rank_table(&checked.plan)))?;
        writeln!(
            out,
            "experiment folder (not created): {}",
            checked.exp_dir.display()
        )?;
        let ok = report(&checked.findings, &mut std::io::sink())?;
        return Ok(if ok {
            ExitStatus::Success
        } else {
            ExitStatus::Failure
        });
    }
    // Every job of a chain is checked before anything is written.
    let chain: Vec<PlanArgs> = args
        .then
        .iter()
        .map(|path| PlanArgs {
            job: Some(path.clone()),
            flags: JobKeys {
                exp_root: args.plan.flags.exp_root.clone(),
                // A placeholder id: the real one is known after the first sbatch.
                after: Some(vec!["1".into()]),
                ..JobKeys::default()
            },
        })
        .collect();
    let mut findings = checked.findings.clone();
    for next in &chain {
        findings.extend(prepare(next, false)?.findings);
    }
    if !report(&findings, &mut std::io::sink())? {
        return Ok(ExitStatus::Failure);
    }
    let mut id = create_and_submit(&checked)?;
    writeln!(out, "{id}")?;
    for mut next in chain {
        next.flags.after = Some(vec![format!("{id}:ok")]);
        id = create_and_submit(&prepare(&next, false)?)?;
        writeln!(out, "{id}")?;
    }
    Ok(ExitStatus::Success)
}
