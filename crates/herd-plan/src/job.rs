//! Job files and cluster profiles: TOML, read strictly.
//!
//! A job file holds the keys of [`JobKeys`] (declared in [`crate::keys`]); a key it does not know is an error naming the
//! key and the file (a misspelt `gpus_per_nodes` must not silently fall back to a default).
//! A cluster profile is the same keys plus `match`, a glob on the login host's name
//! (`"login*"`); profiles fill what neither the job file nor the flags say, like
//! InternVideo `run.py`'s `login` default of `-p gpu --mem=240GB -c 64 -t 2-00:00:00`:
//!
//! ```toml
//! # ~/.config/herd/profiles/10-login.toml
//! match = "login*"
//! partition = "gpu"
//! mem = "240GB"
//! cpus_per_task = 64
//! time = "2-00:00:00"
//! ```
//!
//! Values are checked when the plan is resolved ([`crate::resolve()`]), so every message
//! names the key and where it was set; here only TOML types are checked.

use std::io::Read;
use std::path::{Path, PathBuf};

use globset::{GlobBuilder, GlobMatcher};
use serde::Deserialize;

use crate::keys::JobKeys;

/// Largest job file or profile read (they are a few hundred bytes; a runaway file is an
/// error, not a memory spike).
pub const MAX_FILE_BYTES: u64 = 1 << 20;

impl JobKeys {
    /// Parse TOML text; `path` names the file in errors.
    pub fn parse(text: &str, path: &Path) -> Result<JobKeys, LoadError> {
        toml::from_str(text).map_err(|e| LoadError::Toml {
            path: path.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })
    }
}

/// A job file: its keys and where it is.
#[derive(Debug, Clone, PartialEq)]
pub struct JobFile {
    /// The file (as given; messages show it this way).
    pub path: PathBuf,
    /// Its keys.
    pub keys: JobKeys,
}

impl JobFile {
    /// Read and parse the job file at `path`.
    pub fn load(path: &Path) -> Result<JobFile, LoadError> {
        let text = read_bounded(path)?;
        JobFile::parse(&text, path)
    }

    /// Parse job-file text that was read from `path`.
    pub fn parse(text: &str, path: &Path) -> Result<JobFile, LoadError> {
        Ok(JobFile {
            path: path.to_owned(),
            keys: JobKeys::parse(text, path)?,
        })
    }

    /// The file name without `.toml` (`swav_800ep` for `recipes/swav_800ep.toml`): the
    /// default job name.
    pub fn stem(&self) -> Option<&str> {
        self.path.file_stem().and_then(|s| s.to_str())
    }
}

/// A complete, commented cluster profile: every key a profile may set, with realistic
/// values, and the ones that belong to each job rather than to a cluster commented out.
/// `herd check --example-profile` prints it; docs/submit.md shows it (a test parses the
/// doc's copy with [`Profile::parse`] and resolves it into a plan).
pub const EXAMPLE_PROFILE: &str = include_str!("job/example_profile.toml");

/// Keys that belong to one job and that a profile may not set.
pub const JOB_ONLY_KEYS: [&str; 4] = ["job_name", "command", "params", "after"];

/// A cluster profile: defaults for the login hosts whose name matches `pattern`.
#[derive(Debug, Clone)]
pub struct Profile {
    /// The profile file.
    pub path: PathBuf,
    /// The `match` glob, as written.
    pub pattern: String,
    matcher: GlobMatcher,
    /// Its default keys (never [`JOB_ONLY_KEYS`]).
    pub keys: JobKeys,
}

impl Profile {
    /// Read and parse the profile at `path`.
    pub fn load(path: &Path) -> Result<Profile, LoadError> {
        let text = read_bounded(path)?;
        Profile::parse(&text, path)
    }

    /// Parse profile text that was read from `path`.
    pub fn parse(text: &str, path: &Path) -> Result<Profile, LoadError> {
        let mut table: toml::Table = toml::from_str(text).map_err(|e| LoadError::Toml {
            path: path.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        let pattern =
            match table.remove("match") {
                Some(toml::Value::String(p)) => p,
                Some(other) => {
                    return Err(LoadError::Profile {
                        path: path.to_owned(),
                        message: format!(
                            "`match` must be a host-name glob string such as \"login*\", not a {}",
                            other.type_str()
                        ),
                    })
                }
                None => return Err(LoadError::Profile {
                    path: path.to_owned(),
                    message:
                        "no `match`: add the login host names it is for, e.g. match = \"login*\""
                            .into(),
                }),
            };
        for key in JOB_ONLY_KEYS {
            if table.contains_key(key) {
                return Err(LoadError::Profile {
                    path: path.to_owned(),
                    message: format!(
                        "a profile cannot set `{key}`: it belongs to one job (put it in the job file or give {})",
                        if key == "command" { "it after `--`".to_owned() } else { format!("`{key}` as a flag") }
                    ),
                });
            }
        }
        let matcher = GlobBuilder::new(&pattern)
            .case_insensitive(true)
            .build()
            .map_err(|e| LoadError::Profile {
                path: path.to_owned(),
                message: format!("`match` = {pattern:?} is not a valid glob: {}", e.kind()),
            })?
            .compile_matcher();
        let keys =
            JobKeys::deserialize(toml::Value::Table(table)).map_err(|e| LoadError::Toml {
                path: path.to_owned(),
                message: e.to_string().trim_end().to_owned(),
            })?;
        Ok(Profile {
            path: path.to_owned(),
            pattern,
            matcher,
            keys,
        })
    }

    /// Whether the profile is for `host`: the glob matches the whole name or its short form
    /// (up to the first dot), ignoring case, so `login*` matches `login2.cluster.org` and
    /// `LOGIN2`.
    pub fn matches(&self, host: &str) -> bool {
        let short = host.split('.').next().unwrap_or(host);
        self.matcher.is_match(host) || self.matcher.is_match(short)
    }

    /// The profile's name: its file name without `.toml`.
    pub fn name(&self) -> String {
        self.path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

impl PartialEq for Profile {
    fn eq(&self, other: &Profile) -> bool {
        self.path == other.path && self.pattern == other.pattern && self.keys == other.keys
    }
}

/// The folder cluster profiles are read from: `$XDG_CONFIG_HOME/herd/profiles`, or
/// `~/.config/herd/profiles` when `xdg_config_home` is unset or empty (the caller reads both
/// variables; nothing here looks at the environment).
pub fn profile_dir(xdg_config_home: Option<&Path>, home: &Path) -> PathBuf {
    match xdg_config_home.filter(|p| !p.as_os_str().is_empty() && p.is_absolute()) {
        Some(config) => config.join("herd").join("profiles"),
        None => home.join(".config").join("herd").join("profiles"),
    }
}

/// Every `*.toml` profile in `dir`, in file-name order (the order they are tried in: name
/// them `10-login.toml`, `90-any.toml`). A missing folder has no profiles.
pub fn load_profiles(dir: &Path) -> Result<Vec<Profile>, LoadError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(LoadError::Read {
                path: dir.to_owned(),
                source,
            })
        }
    };
    let mut paths = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| LoadError::Read {
            path: dir.to_owned(),
            source,
        })?;
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "toml") {
            paths.push(path);
        }
    }
    paths.sort();
    paths.iter().map(|p| Profile::load(p)).collect()
}

/// The first of `profiles` that matches `host`.
pub fn select_profile<'a>(profiles: &'a [Profile], host: &str) -> Option<&'a Profile> {
    profiles.iter().find(|p| p.matches(host))
}

fn read_bounded(path: &Path) -> Result<String, LoadError> {
    let file = std::fs::File::open(path).map_err(|source| LoadError::Read {
        path: path.to_owned(),
        source,
    })?;
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|source| LoadError::Read {
            path: path.to_owned(),
            source,
        })?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(LoadError::TooLarge {
            path: path.to_owned(),
            limit: MAX_FILE_BYTES,
        });
    }
    Ok(text)
}

/// A job file or profile that cannot be read or is not valid.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file cannot be read (or is not UTF-8).
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is over [`MAX_FILE_BYTES`].
    #[error("{} is larger than {limit} bytes: not a job file", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit.
        limit: u64,
    },
    /// Not valid TOML, a key herd does not know, or a value of the wrong type; the message
    /// names the key and line.
    #[error("{}: {message}", path.display())]
    Toml {
        /// The file.
        path: PathBuf,
        /// TOML's message (names the key, line and column).
        message: String,
    },
    /// A profile without a usable `match`, or one that sets a job's own key.
    #[error("profile {}: {message}", path.display())]
    Profile {
        /// The profile file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

#[cfg(test)]
mod example;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::Key;
    use crate::values::TextOrNumber;

    fn path() -> PathBuf {
        PathBuf::from("jobs/train.toml")
    }

    /// A job file with every key (each key's example, from its definition) parses, and
    /// each key holds its example.
    #[test]
    fn parses_every_key() {
        let text = crate::keys::every_key_job_file();
        let job = JobFile::parse(&text, &path()).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let back = toml::Table::try_from(&job.keys).unwrap_or_else(|e| panic!("{e}"));
        let want: toml::Table = toml::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, want);
        assert_eq!(back.len(), Key::ALL.len());
        for key in Key::ALL {
            assert!(back.contains_key(key.name()), "`{key}` did not parse");
        }
        assert_eq!(job.keys.nodes, Some(8));
        assert_eq!(job.keys.mem, Some(TextOrNumber::Text("450G".into())));
        assert_eq!(job.keys.gpu_bind.as_deref(), Some("per-rank"));
        assert_eq!(job.stem(), Some("train"));
        let numbers =
            JobFile::parse("mem = 16000\ntime = 90", &path()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(numbers.keys.mem, Some(TextOrNumber::Number(16000)));
        assert_eq!(numbers.keys.time, Some(TextOrNumber::Number(90)));
        // A profile takes every key but a job's own.
        let profile: String = text
            .lines()
            .filter(|l| {
                !JOB_ONLY_KEYS
                    .iter()
                    .any(|k| l.starts_with(&format!("{k} =")))
            })
            .map(|l| format!("{l}\n"))
            .collect();
        let p = Profile::parse(&format!("match = \"*\"\n{profile}"), Path::new("p.toml"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            toml::Table::try_from(&p.keys).map(|t| t.len()).ok(),
            Some(Key::ALL.len() - JOB_ONLY_KEYS.len())
        );
    }

    #[test]
    fn unknown_key_names_key_and_file() {
        let e =
            JobFile::parse("nodes = 2\ngpus_per_nodes = 8\n", &path()).expect_err("unknown key");
        let msg = e.to_string();
        assert!(msg.starts_with("jobs/train.toml: "), "{msg}");
        assert!(msg.contains("gpus_per_nodes"), "{msg}");
        assert!(msg.contains("line 2"), "{msg}");
    }

    #[test]
    fn wrong_types_name_the_key() {
        for (text, key) in [
            ("nodes = \"eight\"", "nodes"),
            ("command = \"python train.py\"", "command"),
            ("mem = 1.5", "mem"),
            ("requeue = \"yes\"", "requeue"),
        ] {
            let msg = JobFile::parse(text, &path()).expect_err(text).to_string();
            assert!(
                msg.contains(key) && msg.contains("jobs/train.toml"),
                "{text}: {msg}"
            );
        }
    }

    #[test]
    fn profiles() {
        let p = Profile::parse(
            "match = \"login*\"\npartition = \"gpu\"\nmem = \"240GB\"\ncpus_per_task = 64\ntime = \"2-00:00:00\"\n",
            Path::new("profiles/10-login.toml"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(p.matches("login1"));
        assert!(p.matches("login2.cluster.example.org"));
        assert!(p.matches("LOGIN3"));
        assert!(!p.matches("gpu-a01"));
        assert!(!p.matches("mylogin1"));
        assert_eq!(p.keys.cpus_per_task, Some(64));
        assert_eq!(p.name(), "10-login");

        let bad = |text: &str| {
            Profile::parse(text, Path::new("p.toml"))
                .expect_err(text)
                .to_string()
        };
        assert!(bad("partition = \"gpu\"").contains("no `match`"));
        assert!(bad("match = 3").contains("glob string"));
        assert!(bad("match = \"login[\"").contains("not a valid glob"));
        assert!(bad("match = \"*\"\ncommand = [\"x\"]").contains("cannot set `command`"));
        assert!(bad("match = \"*\"\njob_name = \"x\"").contains("cannot set `job_name`"));
        let unknown = bad("match = \"*\"\nmemory = \"1G\"");
        assert!(
            unknown.contains("memory") && unknown.contains("p.toml"),
            "{unknown}"
        );
    }

    #[test]
    fn profile_folder_in_name_order() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let write = |name: &str, text: &str| {
            std::fs::write(dir.path().join(name), text).unwrap_or_else(|e| panic!("{e}"))
        };
        write("90-any.toml", "match = \"*\"\npartition = \"cpu\"\n");
        write("10-login.toml", "match = \"login*\"\npartition = \"gpu\"\n");
        write("README.md", "not a profile");
        let profiles = load_profiles(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(profiles.len(), 2);
        let pick =
            |host: &str| select_profile(&profiles, host).and_then(|p| p.keys.partition.clone());
        assert_eq!(pick("login4").as_deref(), Some("gpu"));
        assert_eq!(pick("workstation").as_deref(), Some("cpu"));
        assert!(load_profiles(&dir.path().join("missing")).is_ok_and(|p| p.is_empty()));

        write("50-bad.toml", "match = \"*\"\nbogus = 1\n");
        let e = load_profiles(dir.path()).expect_err("bad profile");
        assert!(e.to_string().contains("50-bad.toml"), "{e}");
    }

    #[test]
    fn profile_folder() {
        let home = Path::new("/home/u");
        assert_eq!(
            profile_dir(None, home),
            PathBuf::from("/home/u/.config/herd/profiles")
        );
        assert_eq!(
            profile_dir(Some(Path::new("/cfg")), home),
            PathBuf::from("/cfg/herd/profiles")
        );
        assert_eq!(
            profile_dir(Some(Path::new("")), home),
            PathBuf::from("/home/u/.config/herd/profiles")
        );
    }

    #[test]
    fn huge_file_is_refused() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let big = dir.path().join("big.toml");
        let text = format!("# {}\n", "x".repeat(MAX_FILE_BYTES as usize));
        std::fs::write(&big, text).unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            JobFile::load(&big),
            Err(LoadError::TooLarge { .. })
        ));
        assert!(matches!(
            JobFile::load(&dir.path().join("none.toml")),
            Err(LoadError::Read { .. })
        ));
    }
}
