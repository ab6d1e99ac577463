//! A sweep as the views get it: its name, its keys and its runs, each with its values and
//! its experiment.

/// One run of a sweep as the views get it.
#[derive(Debug, Clone)]
pub struct SweepRun {
    /// Its array task index.
    pub index: u32,
    /// Its name, the name of its folder in the sweep's: `lr=3e-4,seed=1`.
    pub name: String,
    /// Its values, in the sweep's key order: `[("lr", "3e-4"), ("seed", "1")]`.
    pub values: Vec<(String, String)>,
    /// The run's experiment (manifest, timeline, logs, metrics).
    pub experiment: herd_exp::Experiment,
}

/// A sweep: its name, its keys and its runs.
#[derive(Debug, Clone)]
pub struct Sweep {
    /// The sweep's name (its folder's).
    pub name: String,
    /// Its keys, in order: the value columns.
    pub keys: Vec<String>,
    /// The newest submission's (first) array job id (the id sbatch printed), when the sweep
    /// was submitted; [`Sweep::array_of`] names the array of each run. A run whose
    /// manifest records no job id of its own is taken as task `ID_INDEX` of its array; one
    /// whose manifest records the array's id as task `ID_INDEX` too, and one that records
    /// `ID_INDEX` itself as that task.
    pub job_id: Option<String>,
    /// The newest submission's array jobs, each with its tasks: one per resource shape
    /// (one for a sweep whose runs ask for the same resources). Empty: `job_id` ran them
    /// all.
    pub arrays: Vec<(String, Vec<u32>)>,
    /// Every array job id of every submission, oldest first.
    pub submitted: Vec<String>,
    /// Its runs, in any order.
    pub runs: Vec<SweepRun>,
}

impl SweepRun {
    /// The value of `key`, when the run has one.
    pub fn value(&self, key: &str) -> Option<&str> {
        self.values
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Its values as the legend and the notes say them: `lr=3e-4, seed=1` (its name when
    /// it has none).
    pub fn label(&self) -> String {
        if self.values.is_empty() {
            return self.name.clone();
        }
        self.values
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl Sweep {
    /// The sweep in folder `sweep` (its `sweep.json` and its runs' experiments): the keys
    /// in order, each run's values in that order, the newest submission's array id.
    pub fn from_folder(sweep: &herd_exp::sweep::Sweep) -> Result<Sweep, herd_exp::Error> {
        let manifest = sweep.manifest()?;
        let runs = sweep
            .runs()?
            .into_iter()
            .map(|(run, experiment)| SweepRun {
                index: run.index,
                values: manifest
                    .keys
                    .iter()
                    .filter_map(|k| Some((k.clone(), run.values.get(k)?.clone())))
                    .collect(),
                name: run.name,
                experiment,
            })
            .collect();
        let newest = manifest.submissions.last();
        Ok(Sweep {
            name: manifest.name,
            keys: manifest.keys,
            job_id: newest.map(|s| s.job_id.clone()),
            arrays: newest
                .map(|s| {
                    s.arrays()
                        .into_iter()
                        .map(|a| (a.job_id, a.tasks))
                        .collect()
                })
                .unwrap_or_default(),
            submitted: manifest
                .submissions
                .iter()
                .flat_map(|s| s.arrays().into_iter().map(|a| a.job_id))
                .collect(),
            runs,
        })
    }

    /// The newest submission's array job ids, in order (none before the first).
    pub fn job_ids(&self) -> Vec<String> {
        if self.arrays.is_empty() {
            return self.job_id.iter().cloned().collect();
        }
        self.arrays.iter().map(|(id, _)| id.clone()).collect()
    }

    /// The newest submission's array job that runs task `index` (the first array when
    /// none says so).
    pub fn array_of(&self, index: u32) -> Option<&str> {
        self.arrays
            .iter()
            .find(|(_, tasks)| tasks.contains(&index))
            .map(|(id, _)| id.as_str())
            .or(self.job_id.as_deref())
    }

    /// Its runs in index order.
    pub fn by_index(&self) -> Vec<&SweepRun> {
        let mut runs: Vec<&SweepRun> = self.runs.iter().collect();
        runs.sort_by_key(|r| (r.index, r.name.clone()));
        runs
    }

    /// Its keys, or when none is given, the keys of its runs' values in the order first
    /// seen.
    pub fn columns(&self) -> Vec<String> {
        if !self.keys.is_empty() {
            return self.keys.clone();
        }
        let mut keys: Vec<String> = Vec::new();
        for r in self.by_index() {
            for (k, _) in &r.values {
                if !keys.contains(k) {
                    keys.push(k.clone());
                }
            }
        }
        keys
    }

    /// Whether every run's value of `key` is a finite number (`3e-4`, `8`): its column is
    /// right-aligned.
    pub fn is_numeric(&self, key: &str) -> bool {
        self.runs.iter().all(|r| {
            r.value(key)
                .is_some_and(|v| v.parse::<f64>().is_ok_and(f64::is_finite))
        })
    }

    /// [`Sweep::columns`], each with [`Sweep::is_numeric`]: the value columns of a table.
    pub fn value_columns(&self) -> Vec<(String, bool)> {
        self.columns()
            .into_iter()
            .map(|k| {
                let n = self.is_numeric(&k);
                (k, n)
            })
            .collect()
    }
}

/// Values as a JSON object, key → value (strings, as given; the sweep's `keys` say their
/// order).
pub fn values_json(values: &[(String, String)]) -> serde_json::Value {
    serde_json::Value::Object(
        values
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
            .collect(),
    )
}
