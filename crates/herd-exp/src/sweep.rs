//! The sweep folder (docs/sweeps.md): `<exp_root>/<name>/` holding `sweep.json` (the runs,
//! their values, the submissions), the array's batch script, the array's own SLURM output
//! and one complete experiment folder per run, `<name>/<run>/`, made with
//! [`NewExperiment`] (the runs' code snapshots share one copy of each file: each links
//! the unchanged files of the run before it).
//!
//! Made like an experiment folder: everything is built in a temporary sibling
//! `<exp_root>/.herd-new-*` and renamed into place without replacing anything, so the
//! sweep appears whole or not at all; an existing `<name>` is refused untouched; on any
//! error nothing remains. Nothing inside records the temporary folder's path: the run
//! scripts name the final paths (they are rendered before), the manifests name the
//! project, not their folder.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::layout::{self, SweepDir};
use crate::{
    io_error, manifest, refuse_existing, rename_noreplace, validate_name, write_new_file, Error,
    Experiment, ExtraFile, Invocation, NewExperiment, SnapshotOptions, SnapshotReport,
};

/// The format of `sweep.json` this herd writes.
pub const SWEEP_FORMAT: u32 = 1;

/// `sweep.json`: what the sweep is and every submission of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepManifest {
    /// [`SWEEP_FORMAT`].
    pub format: u32,
    /// The sweep's name (its folder's, and the array job's name).
    pub name: String,
    /// The sweep's keys, in order (a run's name lists its values in this order).
    pub keys: Vec<String>,
    /// Every run, by index.
    pub runs: Vec<SweepRun>,
    /// `--max-parallel`: at most this many runs at once; `None`: as many as SLURM starts.
    pub max_parallel: Option<u32>,
    /// When the sweep was made (RFC 3339, UTC).
    pub created: String,
    /// The herd that made it.
    pub herd_version: String,
    /// Every submission of the array, oldest first.
    #[serde(default)]
    pub submissions: Vec<SweepSubmission>,
}

/// One run of a sweep, as `sweep.json` records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepRun {
    /// Its index: the SLURM array task id that runs it.
    pub index: u32,
    /// Its name: its experiment folder's, inside the sweep folder.
    pub name: String,
    /// Each key's value.
    pub values: BTreeMap<String, String>,
}

/// One submission of a sweep: one array job per resource shape ([`SweepSubmission::arrays`]).
/// `job_id` and `tasks` are its first array's id and every task it runs, as a sweep.json
/// of one array per submission (before sweeps over plan keys) gives them alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepSubmission {
    /// 1 for the first, counting up.
    pub number: u32,
    /// Its first array's job id, as sbatch printed it.
    pub job_id: String,
    /// The task indexes it runs (the runs' indexes), in all its arrays.
    pub tasks: Vec<u32>,
    /// Each array job it made, with its script and tasks; empty in a sweep.json written
    /// before there could be several (then `job_id` ran `tasks` from `job.sbatch`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub arrays: Vec<SweepArray>,
}

/// One array job of a submission: one resource shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepArray {
    /// Its job id, as sbatch printed it.
    pub job_id: String,
    /// Its batch script, a file name in the sweep folder (`job.sbatch`, `job-2.sbatch`).
    pub script: String,
    /// The task indexes it runs (the runs' indexes).
    pub tasks: Vec<u32>,
}

impl SweepSubmission {
    /// Every array job of the submission: those it records, or for a sweep.json of one
    /// array per submission, `job_id` running `tasks` from `job.sbatch`.
    pub fn arrays(&self) -> Vec<SweepArray> {
        if !self.arrays.is_empty() {
            return self.arrays.clone();
        }
        vec![SweepArray {
            job_id: self.job_id.clone(),
            script: layout::JOB_SCRIPT.to_owned(),
            tasks: self.tasks.clone(),
        }]
    }
}

/// One run to create: its name, its values in key order, its plan and its files (its batch
/// script).
#[derive(Debug, Clone, PartialEq)]
pub struct NewRun {
    /// Its name: its folder's, a name [`validate_name`] takes.
    pub name: String,
    /// Each key with its value, in the sweep's key order.
    pub values: Vec<(String, String)>,
    /// Its resolved plan, recorded in its manifest.
    pub plan: serde_json::Value,
    /// Files to put into its folder (its `job.sbatch`).
    pub files: Vec<ExtraFile>,
}

/// Everything needed to create a sweep folder; [`NewSweep::create`] does it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewSweep {
    /// The experiment root; created (with its parents) if missing.
    pub exp_root: PathBuf,
    /// The sweep's name, its folder's: see [`validate_name`].
    pub name: String,
    /// The sweep's keys, in order.
    pub keys: Vec<String>,
    /// Its runs, by index (at least one).
    pub runs: Vec<NewRun>,
    /// `--max-parallel`.
    pub max_parallel: Option<u32>,
    /// The project root, snapshotted into each run's `code/`.
    pub project_root: PathBuf,
    /// herd's version and the command line.
    pub invocation: Invocation,
    /// How to take the snapshots.
    pub snapshot: SnapshotOptions,
    /// The array scripts, one per resource shape: each its file name in the sweep folder
    /// ([`SweepDir::array_script_name`]) and its text.
    pub array_scripts: Vec<(String, Vec<u8>)>,
}

/// A created sweep and what each run's snapshot did.
#[derive(Debug, Clone)]
pub struct CreatedSweep {
    /// The sweep.
    pub sweep: Sweep,
    /// Each run's snapshot, by index.
    pub snapshots: Vec<SnapshotReport>,
}

/// Names a run may not take: the sweep's own entries.
fn taken(name: &str) -> bool {
    let dir = SweepDir::new("");
    [dir.manifest(), dir.job_script(), dir.logs(), dir.lock()]
        .iter()
        .any(|p| p.as_os_str() == name)
        || SweepDir::is_array_script_name(name)
}

impl NewSweep {
    /// Creates `<exp_root>/<name>/` with `sweep.json`, the array script, `logs/` and every
    /// run's experiment folder, all at once or not at all. Refused when the folder exists
    /// ([`Error::AlreadyExists`], checked first and again, atomically, at the rename).
    pub fn create(&self) -> Result<CreatedSweep, Error> {
        validate_name(&self.name)?;
        let bad = |why: String| Error::BadSweep {
            name: self.name.clone(),
            why,
        };
        if self.runs.is_empty() {
            return Err(bad("it has no runs".into()));
        }
        let mut names = std::collections::BTreeSet::new();
        for run in &self.runs {
            validate_name(&run.name)?;
            if taken(&run.name) {
                return Err(bad(format!("a run may not be named `{}`", run.name)));
            }
            if !names.insert(run.name.as_str()) {
                return Err(bad(format!("two runs are named `{}`", run.name)));
            }
        }
        fs::create_dir_all(&self.exp_root)
            .map_err(|e| io_error("cannot create the experiment root", &self.exp_root, e))?;
        let exp_root = fs::canonicalize(&self.exp_root)
            .map_err(|e| io_error("cannot open the experiment root", &self.exp_root, e))?;
        let target = exp_root.join(&self.name);
        refuse_existing(&target)?;

        // Dropping `tmp` (an error, a panic) removes the folder and all in it.
        let tmp = tempfile::Builder::new()
            .prefix(layout::NEW_EXPERIMENT_PREFIX)
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .tempdir_in(&exp_root)
            .map_err(|e| io_error("cannot create a temporary folder in", &exp_root, e))?;
        let new = SweepDir::new(tmp.path());
        fs::create_dir(new.logs()).map_err(|e| io_error("cannot create folder", &new.logs(), e))?;
        if self.array_scripts.is_empty() {
            return Err(bad("it has no array script".into()));
        }
        for (file, text) in &self.array_scripts {
            if !SweepDir::is_array_script_name(file) {
                return Err(bad(format!("`{file}` is no array script's name")));
            }
            write_new_file(
                &new.path().join(file),
                &ExtraFile {
                    name: String::new(),
                    contents: text.clone(),
                    executable: true,
                },
            )?;
        }
        let mut snapshots = Vec::with_capacity(self.runs.len());
        for run in &self.runs {
            let created = NewExperiment {
                exp_root: tmp.path().to_owned(),
                name: run.name.clone(),
                project_root: self.project_root.clone(),
                plan: run.plan.clone(),
                invocation: self.invocation.clone(),
                snapshot: self.snapshot.clone(),
                files: run.files.clone(),
            }
            .create_in(Some(&exp_root))?;
            snapshots.push(created.snapshot);
        }
        let manifest = SweepManifest {
            format: SWEEP_FORMAT,
            name: self.name.clone(),
            keys: self.keys.clone(),
            runs: self
                .runs
                .iter()
                .enumerate()
                .map(|(i, r)| SweepRun {
                    index: u32::try_from(i).unwrap_or(u32::MAX),
                    name: r.name.clone(),
                    values: r.values.iter().cloned().collect(),
                })
                .collect(),
            max_parallel: self.max_parallel,
            created: crate::timeline::now().0,
            herd_version: self.invocation.herd_version.clone(),
            submissions: Vec::new(),
        };
        let path = new.manifest();
        fs::write(&path, manifest::to_bytes(&path, &manifest)?)
            .map_err(|e| io_error("cannot write", &path, e))?;

        rename_noreplace(tmp.path(), &target).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                Error::AlreadyExists {
                    path: target.clone(),
                }
            } else {
                io_error("cannot put the new sweep folder in place at", &target, e)
            }
        })?;
        // The folder now lives at `target`: nothing left to remove.
        let _ = tmp.keep();
        Ok(CreatedSweep {
            sweep: Sweep {
                name: self.name.clone(),
                paths: SweepDir::new(target),
            },
            snapshots,
        })
    }
}

/// Whether `dir` is a sweep folder (it holds a `sweep.json`).
pub fn is_sweep(dir: &Path) -> bool {
    SweepDir::is_sweep(dir)
}

/// An existing sweep folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sweep {
    name: String,
    paths: SweepDir,
}

impl Sweep {
    /// Opens `<exp_root>/<name>/`, which must hold a `sweep.json`.
    pub fn open(exp_root: &Path, name: &str) -> Result<Sweep, Error> {
        validate_name(name)?;
        Sweep::open_dir(&exp_root.join(name))
    }

    /// Opens the sweep folder `dir` (its name is the sweep's), which must hold a
    /// `sweep.json`.
    pub fn open_dir(dir: &Path) -> Result<Sweep, Error> {
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| Error::NotFound {
                path: dir.to_owned(),
            })?;
        if !is_sweep(dir) {
            return Err(if dir.is_dir() {
                Error::NotASweep {
                    path: dir.to_owned(),
                }
            } else {
                Error::NotFound {
                    path: dir.to_owned(),
                }
            });
        }
        Ok(Sweep {
            name: name.to_owned(),
            paths: SweepDir::new(dir),
        })
    }

    /// The sweep's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The sweep folder.
    pub fn dir(&self) -> &Path {
        self.paths.path()
    }

    /// Every path inside the folder ([`layout::SweepDir`]).
    pub fn paths(&self) -> &SweepDir {
        &self.paths
    }

    /// Reads `sweep.json`.
    pub fn manifest(&self) -> Result<SweepManifest, Error> {
        read(&self.paths.manifest())
    }

    /// Every run with its experiment, in index order.
    pub fn runs(&self) -> Result<Vec<(SweepRun, Experiment)>, Error> {
        let mut runs = self.manifest()?.runs;
        runs.sort_by_key(|r| r.index);
        runs.into_iter()
            .map(|r| {
                validate_name(&r.name)?;
                let exp = Experiment::open_dir(self.paths.run(&r.name).path())?;
                Ok((r, exp))
            })
            .collect()
    }

    /// Records a submission of the array: its job id and the task indexes it runs; returns
    /// its number (1 for the first). Read, changed and rewritten under the sweep's lock,
    /// through a temporary file renamed over `sweep.json`.
    pub fn record_submission(&self, job_id: &str, tasks: &[u32]) -> Result<u32, Error> {
        self.record_arrays(&[SweepArray {
            job_id: job_id.to_owned(),
            script: layout::JOB_SCRIPT.to_owned(),
            tasks: tasks.to_vec(),
        }])
    }

    /// Records a submission of one array job per resource shape (`arrays`, at least one):
    /// each with its script and tasks; returns its number (1 for the first). Read, changed
    /// and rewritten under the sweep's lock, through a temporary file renamed over
    /// `sweep.json`.
    pub fn record_arrays(&self, arrays: &[SweepArray]) -> Result<u32, Error> {
        let Some(first) = arrays.first() else {
            return Err(Error::BadSweep {
                name: self.name.clone(),
                why: "a submission without an array job".into(),
            });
        };
        for a in arrays {
            crate::check_job_id(&a.job_id)?;
        }
        let lock_path = self.paths.lock();
        let lock = crate::lock_exclusive(&lock_path)?;
        let path = self.paths.manifest();
        let mut m = read(&path)?;
        let number = m
            .submissions
            .last()
            .map_or(1, |s| s.number.saturating_add(1));
        m.submissions.push(SweepSubmission {
            number,
            job_id: first.job_id.clone(),
            tasks: arrays
                .iter()
                .flat_map(|a| a.tasks.iter().copied())
                .collect(),
            // One array of `job.sbatch` is what `job_id` and `tasks` say alone: written as
            // before there could be several.
            arrays: match arrays {
                [one] if one.script == layout::JOB_SCRIPT => Vec::new(),
                _ => arrays.to_vec(),
            },
        });
        manifest::replace(&path, &m)?;
        drop(lock);
        Ok(number)
    }
}

/// Reads and checks `sweep.json` at `path`.
fn read(path: &Path) -> Result<SweepManifest, Error> {
    let bytes = fs::read(path).map_err(|e| io_error("cannot read", path, e))?;
    let m: SweepManifest =
        serde_json::from_slice(&bytes).map_err(|source| Error::ManifestParse {
            path: path.to_owned(),
            source,
        })?;
    if m.format > SWEEP_FORMAT {
        return Err(Error::ManifestFormat {
            path: path.to_owned(),
            found: m.format,
        });
    }
    Ok(m)
}

/// Every sweep directly under `exp_root` (folders with a `sweep.json`; temporary folders
/// of a submit in progress are not), by name; none when the root does not exist.
pub fn list(exp_root: &Path) -> Result<Vec<Sweep>, Error> {
    let entries = match fs::read_dir(exp_root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error("cannot list", exp_root, e)),
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if name.starts_with('.') || !is_sweep(&path) {
            continue;
        }
        found.push(Sweep {
            name: name.to_owned(),
            paths: SweepDir::new(path),
        });
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(found)
}

#[cfg(test)]
mod tests;
