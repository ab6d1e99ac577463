//! `herd submit --sweep KEY=V1,V2,… / --sweep-file FILE [--max-parallel P]`: one job run
//! over a grid of values as one SLURM array job, one experiment per run inside the sweep's
//! folder (docs/sweeps.md).
//!
//! Every run's plan is resolved (its command's `{KEY}`s replaced by its values, its plan
//! keys, `--sweep nodes=1,2`, set from its values as their flags would), rendered for its
//! own folder and checked before anything is written. One array job has one resource
//! request: the runs whose `#SBATCH` lines are the same are one shape, one array job with
//! their tasks ([`herd_plan::shapes`]). Then the sweep folder is made whole
//! ([`herd_exp::sweep::NewSweep`]), each shape's array script queued, and every run records
//! its task's id (`ARRAYID_INDEX`) as its job id, as a single job records its own.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use herd_exp::layout::SweepDir;
use herd_plan::sweep::{check_command, check_plan_keys, grid_table, run_flags, substitute};
use herd_plan::{
    array_spec, cpus_line, render_array_script, shapes, ArrayParams, Finding, JobFile, JobKeys,
    Plan, SweepError, SweepFile, SweepRunSpec, SweepSpec,
};

use crate::submit::{
    dependency, plan_with, record_task, render_and_check, report, submit_error, Site, SubmitArgs,
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

/// One resource shape of a sweep: its array script's file name and text, its runs'
/// indexes (its array's tasks), and what its runs' workers get of CPUs
/// ([`herd_plan::cpus_line`], each different line once).
struct Shape {
    file: String,
    script: String,
    tasks: Vec<u32>,
    cpus: Vec<String>,
}

/// A checked sweep: its runs with their plans and scripts, one array script per resource
/// shape, findings.
struct Prepared {
    name: String,
    exp_root: PathBuf,
    sweep_dir: PathBuf,
    keys: Vec<String>,
    runs: Vec<(SweepRunSpec, Plan, String)>,
    shapes: Vec<Shape>,
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
        problems.extend(check_plan_keys(spec.keys(), flags));
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
    // Each run's flags: the user's, with the run's plan keys set from its values.
    let mut problems: Vec<String> = Vec::new();
    let mut run_keys: Vec<JobKeys> = Vec::with_capacity(specs.len());
    for run in &specs {
        match run_flags(flags, &run.values) {
            Ok(k) => run_keys.push(k),
            Err(found) => {
                for p in found {
                    if !problems.contains(&p) {
                        problems.push(p);
                    }
                }
            }
        }
    }
    if !problems.is_empty() {
        return Err(SweepError { problems }.into());
    }

    // The sweep as one job: its name, root, dependency and the nodes it leaves out (its
    // first run's plan: the keys a sweep may set per run are none of these).
    let mut template = plan_with(job.as_ref(), run_keys.first().unwrap_or(flags))?;
    crate::nodes::avoid_bad_nodes(&mut template);
    if let Some(taken) = crate::submit::free_default_name(&mut template) {
        eprintln!("{}", crate::submit::taken_note(&taken, &template));
    }
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
    for (run, mut flags) in specs.into_iter().zip(run_keys) {
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
    // One array job per resource shape: the runs whose #SBATCH lines are the same.
    let scripts: Vec<&str> = runs.iter().map(|(_, _, s)| s.as_str()).collect();
    let groups = shapes(&scripts);
    let mut arrays = Vec::with_capacity(groups.len());
    for (n, members) in groups.iter().enumerate() {
        let of_shape: Vec<(u32, String, String)> = members
            .iter()
            .map(|&i| {
                let (r, _, s) = &runs[i];
                (index(r), r.name.clone(), s.clone())
            })
            .collect();
        let mut cpus: Vec<String> = Vec::new();
        for &i in members {
            let line = cpus_line(&runs[i].1);
            if !cpus.contains(&line) {
                cpus.push(line);
            }
        }
        arrays.push(Shape {
            file: SweepDir::array_script_name(n + 1, groups.len()),
            script: render_array_script(&ArrayParams {
                sweep_dir: &sweep_dir,
                runs: &of_shape,
                max_parallel: args.max_parallel,
            })?,
            tasks: of_shape.iter().map(|(i, _, _)| *i).collect(),
            cpus,
        });
    }
    Ok(Prepared {
        name,
        exp_root: template.exp_root,
        sweep_dir,
        keys: spec.keys().to_vec(),
        runs,
        shapes: arrays,
        findings,
    })
}

/// A run's index as its array task's id.
fn index(run: &SweepRunSpec) -> u32 {
    u32::try_from(run.index).unwrap_or(u32::MAX)
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
        )
        .refused());
    }
    let dry_run = submit.dry_run();
    let p = prepare(args, submit.plan_args()).map_err(CliError::refused)?;
    if dry_run {
        let specs: Vec<SweepRunSpec> = p.runs.iter().map(|(r, _, _)| r.clone()).collect();
        write!(out, "{}", grid_table(&p.keys, &specs))?;
        for shape in &p.shapes {
            writeln!(out)?;
            if p.shapes.len() > 1 {
                writeln!(
                    out,
                    "# {}: runs {} (one resource shape, one array job)",
                    shape.file,
                    array_spec(&shape.tasks)
                )?;
            }
            writeln!(out, "{}", shape.script.trim_end())?;
            for line in &shape.cpus {
                writeln!(out, "{line}")?;
            }
        }
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
        array_scripts: p
            .shapes
            .iter()
            .map(|s| (s.file.clone(), s.script.clone().into_bytes()))
            .collect(),
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
        // Every run's walk finds the same project: its lines once, from the first run.
        let said = [
            crate::snapshot_lines::left_out_line(&first.herd_outputs),
            crate::snapshot_lines::envs_line(&first.python_envs),
            crate::snapshot_lines::size_line(first),
        ];
        for line in said.into_iter().flatten() {
            eprintln!("{line}");
        }
        // Every run's walk finds the same: each warning once.
        let mut said = std::collections::BTreeSet::new();
        for warning in created.snapshots.iter().flat_map(|s| &s.warnings) {
            if said.insert(warning) {
                eprintln!("herd: warning: snapshot: {warning}");
            }
        }
    }
    let mut arrays: Vec<herd_exp::sweep::SweepArray> = Vec::with_capacity(p.shapes.len());
    for shape in &p.shapes {
        match herd_slurm::scheduler::command::sbatch(&sweep.dir().join(&shape.file), sweep.dir()) {
            Ok(id) => arrays.push(herd_exp::sweep::SweepArray {
                job_id: id,
                script: shape.file.clone(),
                tasks: shape.tasks.clone(),
            }),
            Err(source) => {
                // Take back the arrays already queued, then remove the folder: nothing ran
                // from it, and the same name can be used again.
                let queued: Vec<&str> = arrays.iter().map(|a| a.job_id.as_str()).collect();
                let kept = !queued.is_empty()
                    && herd_slurm::scheduler::command::scancel(&queued, None).is_err();
                if kept {
                    eprintln!(
                        "herd: warning: array jobs {} were queued but could not be cancelled: cancel them with scancel; the sweep folder is kept",
                        queued.join(", ")
                    );
                } else {
                    let _ = std::fs::remove_dir_all(sweep.dir());
                }
                return Err(CliError::Sbatch {
                    what: if kept {
                        format!("the sweep's array job of {}", shape.file)
                    } else if queued.is_empty() {
                        "the sweep's array job, so no sweep folder was kept".into()
                    } else {
                        format!(
                            "the sweep's array job of {}, so the arrays queued before ({}) were cancelled and no sweep folder was kept",
                            shape.file,
                            queued.join(", ")
                        )
                    },
                    source,
                });
            }
        }
    }
    let ids: Vec<String> = arrays.iter().map(|a| a.job_id.clone()).collect();
    sweep
        .record_arrays(&arrays)
        .map_err(|source| CliError::RecordJobId {
            job_id: ids.join(","),
            source,
        })?;
    let mut unrecorded = None;
    for (run, exp) in sweep.runs()? {
        let Some(array) = arrays.iter().find(|a| a.tasks.contains(&run.index)) else {
            continue;
        };
        let task = format!("{}_{}", array.job_id, run.index);
        record_task(&exp, || Ok(1), task, &mut unrecorded);
    }
    for id in &ids {
        writeln!(out, "{id}")?;
    }
    let at_once = match args.max_parallel {
        Some(p) => format!(
            " (at most {p} at once{})",
            if ids.len() > 1 { " in each job" } else { "" }
        ),
        None => String::new(),
    };
    let jobs = match &ids[..] {
        [one] => format!("job {one}"),
        _ => format!("jobs {} ({} shapes)", ids.join(", "), ids.len()),
    };
    eprintln!(
        "herd: submitted sweep {}: {jobs}, {} runs{at_once}: experiment folder {}",
        p.name,
        p.runs.len(),
        sweep.dir().display()
    );
    match unrecorded {
        Some(e) => Err(e),
        None => Ok(ExitStatus::Success),
    }
}
