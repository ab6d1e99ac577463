//! `herd submit --sweep KEY=V1,V2,… / --sweep-file FILE [--max-parallel P]`: one job run
//! over a grid of values as one SLURM array job, one experiment per run inside the sweep's
//! folder (docs/sweeps.md).
//!
//! Every run's plan is resolved (its command's `{KEY}`s replaced by its values), rendered
//! for its own folder and checked before anything is written; the runs must ask for the
//! same resources (one array job has one resource request). Then the sweep folder is made
//! whole ([`herd_exp::sweep::NewSweep`]), the array script queued, and every run records
//! its task's id (`ARRAYID_INDEX`) as its job id, as a single job records its own.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use herd_plan::sweep::{check_command, grid_table, substitute};
use herd_plan::{
    render_array_script, ArrayParams, Finding, JobFile, Plan, SweepError, SweepFile, SweepRunSpec,
    SweepSpec,
};

use crate::submit::{
    dependency, plan_with, record_queued, render_and_check, report, submit_error, Site, SubmitArgs,
    SweepArgs,
};
use crate::{CliError, ExitStatus};

/// The largest sweep file herd reads.
const MAX_SWEEP_FILE_BYTES: u64 = 1 << 20;

fn read_sweep_file(path: &Path) -> Result<SweepFile, CliError> {
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_SWEEP_FILE_BYTES + 1).read_to_string(&mut text))
        .map_err(|e| CliError::Input(format!("cannot read sweep file {}: {e}", path.display())))?;
    if text.len() as u64 > MAX_SWEEP_FILE_BYTES {
        return Err(CliError::Input(format!(
            "sweep file {} is larger than {MAX_SWEEP_FILE_BYTES} bytes: not a sweep file",
            path.display()
        )));
    }
    Ok(SweepFile::parse(&text, path)?)
}

/// A checked sweep: its runs with their plans and scripts, the array script, findings.
struct Prepared {
    name: String,
    exp_root: PathBuf,
    sweep_dir: PathBuf,
    keys: Vec<String>,
    runs: Vec<(SweepRunSpec, Plan, String)>,
    array_script: String,
    findings: Vec<Finding>,
}

/// The spec, its runs and the placeholders checked; every problem collected.
fn spec(
    args: &SweepArgs,
    job: Option<&JobFile>,
    flags: &herd_plan::JobKeys,
) -> Result<(SweepSpec, Vec<SweepRunSpec>), CliError> {
    let file = match &args.sweep_file {
        Some(path) => Some(read_sweep_file(path)?),
        None => None,
    };
    let mut problems = Vec::new();
    if args.max_parallel == Some(0) {
        problems.push("--max-parallel 0: give at least 1".to_owned());
    }
    let spec = match SweepSpec::build(&args.sweep, file.as_ref()) {
        Ok(s) => Some(s),
        Err(e) => {
            problems.extend(e.problems);
            None
        }
    };
    let command = flags
        .command
        .as_ref()
        .or_else(|| job.and_then(|j| j.keys.command.as_ref()));
    let params: Vec<String> = match (&flags.command, job) {
        (None, Some(j)) => j.keys.params.clone().unwrap_or_default(),
        _ => Vec::new(),
    };
    let mut runs = Vec::new();
    if let Some(spec) = &spec {
        if let Some(cmd) = command {
            problems.extend(check_command(cmd, spec.keys(), &params));
        }
        match spec.runs() {
            Ok(r) => runs = r,
            Err(e) => problems.extend(e.problems),
        }
        if spec.len() == 1 {
            problems.push(
                "the sweep has one run: submit it as a single job (without --sweep), or give more values"
                    .to_owned(),
            );
        }
    }
    match spec {
        Some(spec) if problems.is_empty() => Ok((spec, runs)),
        _ => Err(SweepError { problems }.into()),
    }
}

/// Resolve, render and check every run, and render the array script; writes nothing.
fn prepare(args: &SweepArgs, plan_args: &herd_plan::PlanArgs) -> Result<Prepared, CliError> {
    let job = match &plan_args.job {
        Some(path) => Some(JobFile::load(path)?),
        None => None,
    };
    let flags = &plan_args.flags;
    let (spec, specs) = spec(args, job.as_ref(), flags)?;

    // The sweep as one job: its name, root, dependency and the nodes it leaves out.
    let mut template = plan_with(job.as_ref(), flags)?;
    crate::nodes::avoid_bad_nodes(&mut template);
    let name = template.job_name.clone();
    let sweep_dir =
        herd_exp::experiment_dir(&template.exp_root, &name).map_err(herd_exp::Error::from)?;
    let site = Site::query()?;
    let mut findings: Vec<Finding> = Vec::new();
    let dependency = match dependency(&template.after) {
        Ok(d) => d,
        Err(problems) => {
            for p in problems {
                add(submit_error(p), &mut findings);
            }
            None
        }
    };

    let mut runs = Vec::with_capacity(specs.len());
    let mut first: Option<serde_json::Value> = None;
    for run in specs {
        let mut flags = flags.clone();
        let mut job = job.clone();
        match (&mut flags.command, &mut job) {
            (Some(cmd), _) => *cmd = substitute(cmd, &run.values),
            (None, Some(j)) => {
                if let Some(cmd) = &mut j.keys.command {
                    *cmd = substitute(cmd, &run.values);
                }
            }
            (None, None) => {}
        }
        let mut plan = plan_with(job.as_ref(), &flags)?;
        // One array job: one name, the nodes left out once for all; the run's experiment
        // root is the sweep's folder.
        plan.job_name = name.clone();
        plan.avoided_nodes = template.avoided_nodes.clone();
        plan.exp_root = sweep_dir.clone();
        let exp_dir = sweep_dir.join(&run.name);
        let (script, found) = render_and_check(&plan, &exp_dir, dependency.as_deref(), &site)?;
        for f in found {
            add(f, &mut findings);
        }
        // Only the command may differ between runs.
        let mut shape = serde_json::to_value(&plan).map_err(CliError::PlanJson)?;
        if let Some(m) = shape.as_object_mut() {
            m.remove("command");
        }
        match &first {
            None => first = Some(shape),
            Some(want) if *want != shape => {
                let keys: Vec<String> = match (want.as_object(), shape.as_object()) {
                    (Some(a), Some(b)) => a
                        .keys()
                        .filter(|k| a.get(*k) != b.get(*k))
                        .cloned()
                        .collect(),
                    _ => Vec::new(),
                };
                add(
                    submit_error(format!(
                        "run {} resolves to another plan than the first run (`{}` differ): only the command may differ between a sweep's runs; keep {{KEY}} placeholders in the command",
                        run.name,
                        keys.join("`, `")
                    )),
                    &mut findings,
                );
            }
            Some(_) => {}
        }
        runs.push((run, plan, script));
    }
    if sweep_dir.exists() {
        add(
            submit_error(format!(
                "sweep folder {} exists and is never overwritten: choose another `job_name` (--job-name)",
                sweep_dir.display()
            )),
            &mut findings,
        );
    }
    let scripts: Vec<(String, String)> = runs
        .iter()
        .map(|(r, _, s)| (r.name.clone(), s.clone()))
        .collect();
    let array_script = render_array_script(&ArrayParams {
        sweep_dir: &sweep_dir,
        runs: &scripts,
        max_parallel: args.max_parallel,
    })?;
    Ok(Prepared {
        name,
        exp_root: template.exp_root,
        sweep_dir,
        keys: spec.keys().to_vec(),
        runs,
        array_script,
        findings,
    })
}

/// `finding` added to `findings` unless one says the same already (every run's checks find
/// the same things).
fn add(finding: Finding, findings: &mut Vec<Finding>) {
    if !findings.iter().any(|g| {
        g.severity == finding.severity && g.code == finding.code && g.message == finding.message
    }) {
        findings.push(finding);
    }
}

/// `herd submit --sweep …`: check every run, make the sweep folder, queue the array.
pub fn run(submit: &SubmitArgs, out: &mut dyn Write) -> Result<ExitStatus, CliError> {
    let args = submit.sweep_args();
    if submit.wait() {
        return Err(CliError::Usage(
            "--wait does not watch a sweep yet: submit without --wait, then follow its runs with `herd status`".into(),
        ));
    }
    let dry_run = submit.dry_run();
    let p = prepare(args, submit.plan_args())?;
    if dry_run {
        let specs: Vec<SweepRunSpec> = p.runs.iter().map(|(r, _, _)| r.clone()).collect();
        write!(out, "{}", grid_table(&p.keys, &specs))?;
        writeln!(out)?;
        writeln!(out, "{}", p.array_script.trim_end())?;
        writeln!(out)?;
        writeln!(
            out,
            "sweep folder (not created): {} ({} runs)",
            p.sweep_dir.display(),
            p.runs.len()
        )?;
        report(&p.findings, &mut std::io::sink())?;
        return Ok(ExitStatus::Success);
    }
    report(&p.findings, &mut std::io::sink())?;

    let project = crate::submit::working_folder()?;
    let exclude = p.runs.first().map(|(_, plan, _)| plan.exclude.clone());
    let mut runs = Vec::with_capacity(p.runs.len());
    for (run, plan, script) in &p.runs {
        runs.push(herd_exp::sweep::NewRun {
            name: run.name.clone(),
            values: run.values.clone(),
            plan: serde_json::to_value(plan).map_err(CliError::PlanJson)?,
            files: vec![herd_exp::ExtraFile {
                name: herd_exp::ExperimentDir::job_script_name().into(),
                contents: script.clone().into_bytes(),
                executable: true,
            }],
        });
    }
    let created = herd_exp::sweep::NewSweep {
        exp_root: p.exp_root.clone(),
        name: p.name.clone(),
        keys: p.keys.clone(),
        runs,
        max_parallel: args.max_parallel,
        project_root: project,
        invocation: herd_exp::Invocation::current(env!("CARGO_PKG_VERSION")),
        snapshot: herd_exp::SnapshotOptions {
            exclude: exclude.unwrap_or_default(),
            ..herd_exp::SnapshotOptions::default()
        },
        array_script: p.array_script.clone().into_bytes(),
    }
    .create()?;
    let sweep = &created.sweep;
    if let Some(first) = created.snapshots.first() {
        let copied: u64 = created.snapshots.iter().map(|s| s.copied).sum();
        let linked: u64 = created.snapshots.iter().map(|s| s.linked).sum();
        eprintln!(
            "herd: code snapshots of {} runs in {}: {} file{} ({:.1} MB) each, {copied} copied, {linked} linked (unchanged files are shared)",
            created.snapshots.len(),
            sweep.dir().display(),
            first.files,
            if first.files == 1 { "" } else { "s" },
            first.bytes as f64 / 1e6,
        );
        // Every run's walk finds the same: each warning once.
        let mut said = std::collections::BTreeSet::new();
        for warning in created.snapshots.iter().flat_map(|s| &s.warnings) {
            if said.insert(warning) {
                eprintln!("herd: warning: snapshot: {warning}");
            }
        }
    }
    let id = match herd_slurm::scheduler::command::sbatch(&sweep.paths().job_script(), sweep.dir())
    {
        Ok(id) => id,
        Err(source) => {
            // Nothing ran from this folder: remove it, so the same name can be used again.
            let _ = std::fs::remove_dir_all(sweep.dir());
            return Err(CliError::Sbatch {
                what: "the sweep's array job, so no sweep folder was kept".into(),
                source,
            });
        }
    };
    let tasks: Vec<u32> = (0..u32::try_from(p.runs.len()).unwrap_or(u32::MAX)).collect();
    sweep
        .record_submission(&id, &tasks)
        .map_err(|source| CliError::RecordJobId {
            job_id: id.clone(),
            source,
        })?;
    let mut unrecorded = None;
    for (run, exp) in sweep.runs()? {
        let task = format!("{id}_{}", run.index);
        match exp.record_job_id(1, &task) {
            Ok(()) => record_queued(&exp, 1, &task),
            Err(source) => {
                unrecorded.get_or_insert(CliError::RecordJobId {
                    job_id: task,
                    source,
                });
            }
        }
    }
    writeln!(out, "{id}")?;
    let at_once = match args.max_parallel {
        Some(p) => format!(" (at most {p} at once)"),
        None => String::new(),
    };
    eprintln!(
        "herd: submitted sweep {}: job {id}, {} runs{at_once}: experiment folder {}",
        p.name,
        p.runs.len(),
        sweep.dir().display()
    );
    match unrecorded {
        Some(e) => Err(e),
        None => Ok(ExitStatus::Success),
    }
}
