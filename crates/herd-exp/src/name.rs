//! Job names: one folder name under the experiment root.

use std::fmt;

/// Longest job name, in bytes.
pub const MAX_NAME_BYTES: usize = 200;

/// Names starting with this are herd's own temporary folders and files.
pub(crate) const RESERVED_PREFIX: &str = ".herd-";

/// Why a job name (or a file name inside an experiment) is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NameProblem {
    /// The name is empty.
    Empty,
    /// The name is `.` or `..`.
    Dots,
    /// The name is longer than [`MAX_NAME_BYTES`].
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The name contains `/`.
    Slash {
        /// Byte offset of the first `/`.
        at: usize,
    },
    /// The name contains a NUL byte.
    Nul {
        /// Byte offset of the first NUL.
        at: usize,
    },
    /// The name contains a control character (newline, tab, escape, DEL, …).
    Control {
        /// The character.
        ch: char,
        /// Byte offset of the character.
        at: usize,
    },
    /// The name starts with `.herd-`, which herd keeps for its temporary folders.
    Reserved,
    /// A file name that herd uses itself inside an experiment folder.
    Taken,
}

/// A refused name: the name and what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct NameError {
    /// What the name is used for: `job name` or `file name`.
    pub what: &'static str,
    /// The refused name.
    pub name: String,
    /// What is wrong with it.
    pub problem: NameProblem,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `{:?}` escapes control characters, so the message is safe to print.
        let shown = if self.name.len() > 60 {
            let mut cut = 60;
            while !self.name.is_char_boundary(cut) {
                cut -= 1;
            }
            format!("{:?}…", &self.name[..cut])
        } else {
            format!("{:?}", self.name)
        };
        let what = self.what;
        match &self.problem {
            NameProblem::Empty => write!(
                f,
                "{what} is empty: give it a name (it becomes a folder name)"
            ),
            NameProblem::Dots => write!(
                f,
                "{what} {shown} is not allowed: `.` and `..` name existing folders; choose another name"
            ),
            NameProblem::TooLong { len } => write!(
                f,
                "{what} {shown} is {len} bytes long, more than {MAX_NAME_BYTES}: shorten it"
            ),
            NameProblem::Slash { at } => write!(
                f,
                "{what} {shown} contains `/` at byte {at}: it is one folder name, not a path; use `-` or `_` instead"
            ),
            NameProblem::Nul { at } => write!(
                f,
                "{what} {shown} contains a NUL byte at byte {at}: remove it"
            ),
            NameProblem::Control { ch, at } => write!(
                f,
                "{what} {shown} contains the control character U+{:04X} at byte {at}: remove it (names are one line of printable text)",
                *ch as u32
            ),
            NameProblem::Reserved => write!(
                f,
                "{what} {shown} starts with `{RESERVED_PREFIX}`, which herd keeps for its temporary folders: choose another name"
            ),
            NameProblem::Taken => write!(
                f,
                "{what} {shown} is a name herd uses itself inside the experiment folder: choose another name"
            ),
        }
    }
}

/// Checks a job name: it becomes the folder `<exp_root>/<name>`.
///
/// Refused: empty, `.` or `..`, longer than [`MAX_NAME_BYTES`] bytes, containing `/`, NUL or
/// any control character (newlines included), or starting with `.herd-` (herd's temporary
/// folders). Everything else (spaces, unicode, a leading `-`) is allowed: herd never passes
/// a name through a shell.
///
/// ```
/// use herd_exp::validate_name;
/// assert!(validate_name("resnet50 lr=0.1").is_ok());
/// let err = validate_name("runs/a").unwrap_err();
/// assert!(err.to_string().contains("contains `/` at byte 4"));
/// ```
pub fn validate_name(name: &str) -> Result<(), NameError> {
    check("job name", name)
}

pub(crate) fn check(what: &'static str, name: &str) -> Result<(), NameError> {
    let problem = if name.is_empty() {
        Some(NameProblem::Empty)
    } else if name.len() > MAX_NAME_BYTES {
        Some(NameProblem::TooLong { len: name.len() })
    } else if name == "." || name == ".." {
        Some(NameProblem::Dots)
    } else if let Some((at, ch)) = name
        .char_indices()
        .find(|&(_, c)| c == '/' || c.is_control())
    {
        Some(match ch {
            '/' => NameProblem::Slash { at },
            '\0' => NameProblem::Nul { at },
            ch => NameProblem::Control { ch, at },
        })
    } else if name.starts_with(RESERVED_PREFIX) {
        Some(NameProblem::Reserved)
    } else {
        None
    };
    match problem {
        None => Ok(()),
        Some(problem) => Err(NameError {
            what,
            name: name.to_owned(),
            problem,
        }),
    }
}
