//! `container_mounts`: host folders mounted inside, written as Pyxis' `--container-mounts`
//! is: `SRC[:DST[:ro|rw]]`, several separated by commas.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// One host folder (or file) mounted inside the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The host path.
    pub src: PathBuf,
    /// Where it is inside (the same path when not given).
    pub dst: PathBuf,
    /// Mounted read-only (`:ro`).
    pub read_only: bool,
}

impl fmt::Display for Mount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.src.display())?;
        if self.dst != self.src || self.read_only {
            write!(f, ":{}", self.dst.display())?;
        }
        if self.read_only {
            f.write_str(":ro")?;
        }
        Ok(())
    }
}

impl FromStr for Mount {
    type Err = String;

    fn from_str(s: &str) -> Result<Mount, String> {
        let parts: Vec<&str> = s.split(':').collect();
        let (src, dst, flag) = match parts.as_slice() {
            [src] => (*src, *src, None),
            [src, dst] => (*src, *dst, None),
            [src, dst, flag] => (*src, *dst, Some(*flag)),
            _ => {
                return Err(format!(
                    "container mount `{s}` has too many `:`: write SRC, SRC:DST or SRC:DST:ro"
                ))
            }
        };
        let read_only = match flag {
            None | Some("rw") => false,
            Some("ro") => true,
            Some(other) => {
                return Err(format!(
                    "container mount `{s}`: unknown flag `{other}`; use ro or rw"
                ))
            }
        };
        for (what, p) in [("source", src), ("destination", dst)] {
            if !p.starts_with('/') {
                return Err(format!(
                    "container mount `{s}`: the {what} `{p}` is not an absolute path"
                ));
            }
        }
        Ok(Mount {
            src: PathBuf::from(src),
            dst: PathBuf::from(dst),
            read_only,
        })
    }
}

/// A list of mounts, written `SRC[:DST[:ro]],…`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mounts(pub Vec<Mount>);

impl FromStr for Mounts {
    type Err = String;

    fn from_str(s: &str) -> Result<Mounts, String> {
        s.split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(Mount::from_str)
            .collect::<Result<Vec<_>, _>>()
            .map(Mounts)
    }
}

impl fmt::Display for Mounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(Mount::to_string).collect();
        f.write_str(&parts.join(","))
    }
}

/// `paths` without those inside another of them, each once, in order.
pub(crate) fn outermost(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut sorted: Vec<&PathBuf> = paths.iter().collect();
    sorted.sort();
    let mut out: Vec<PathBuf> = Vec::new();
    for p in sorted {
        if !out.iter().any(|o| p.starts_with(o)) {
            out.push(p.clone());
        }
    }
    out
}

/// The host folders a runtime that makes its own mount points (Podman, Pyxis) binds at
/// their own paths: the outermost of `wanted` (never a system folder, which would hide the
/// image's own) and the agent's folder `dir`.
pub(crate) fn own_path_binds(wanted: &[PathBuf], dir: &Path) -> Vec<PathBuf> {
    let mut all: Vec<PathBuf> = wanted
        .iter()
        .filter(|p| p.is_absolute() && !is_system(p))
        .cloned()
        .collect();
    all.push(dir.to_owned());
    outermost(&all)
}

/// Whether `p` is a folder of the operating system itself, which a bind must never cover.
pub(crate) fn is_system(p: &Path) -> bool {
    const SYSTEM: [&str; 13] = [
        "/", "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/proc", "/sbin", "/sys",
        "/usr", "/var",
    ];
    SYSTEM.iter().any(|s| Path::new(s) == p)
}
