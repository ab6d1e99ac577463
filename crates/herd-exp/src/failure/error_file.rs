//! torch's error file: what a worker's `@record`-decorated entry point says about the
//! exception that ended it.
//!
//! torchrun gives every worker `TORCHELASTIC_ERROR_FILE`; `torch.distributed.elastic.
//! multiprocessing.errors.record` catches an exception escaping the function it decorates
//! and writes there, before re-raising it:
//!
//! ```json
//! {"message": {"message": "ValueError: bad shard 7",
//!              "extraInfo": {"py_callstack": "Traceback (most recent call last):\n…",
//!                            "timestamp": "1796060412"}}}
//! ```
//!
//! (older writers put a plain string in `message`). herd gives each worker one such file
//! per attempt ([`crate::layout::AttemptDir::error_file`]), and the failure report leads
//! with what the failing rank wrote there.

use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Largest error file read: a traceback is a few kilobytes; a runaway file is cut off, not
/// read whole.
pub const MAX_ERROR_FILE: u64 = 1 << 20;
/// Most of the traceback kept in the report (its end: the innermost frames).
pub const MAX_TRACEBACK: usize = 16 * 1024;

/// The innermost frame of a Python traceback.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    /// The source file.
    pub file: String,
    /// The line number.
    pub line: u32,
    /// The function (`<module>` at top level).
    pub function: String,
    /// The source line, when the traceback shows it.
    pub code: Option<String>,
}

impl std::fmt::Display for Frame {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{} in {}", self.file, self.line, self.function)?;
        if let Some(code) = &self.code {
            write!(f, ": {code}")?;
        }
        Ok(())
    }
}

/// What a worker recorded about the exception that ended it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerError {
    /// `Type: message`, as torch writes it (`ValueError: bad shard 7`).
    pub message: String,
    /// The exception's type (`ValueError`), when the message starts with one.
    pub exception: Option<String>,
    /// Where it was raised: the innermost frame of the traceback.
    pub frame: Option<Frame>,
    /// The traceback's end (at most [`MAX_TRACEBACK`] bytes).
    pub traceback: Option<String>,
    /// The error file it was read from.
    pub error_file: PathBuf,
}

impl WorkerError {
    /// Read and parse `path`; `None` when the worker wrote none (it died by a signal, did
    /// not use `@record`, or failed outside it) or wrote something that is not torch's
    /// format.
    pub fn read(path: &Path) -> Option<WorkerError> {
        let mut text = String::new();
        std::fs::File::open(path)
            .ok()?
            .take(MAX_ERROR_FILE)
            .read_to_string(&mut text)
            .ok()?;
        WorkerError::parse(&text, path)
    }

    /// Parse the text of an error file read from `path`.
    pub fn parse(text: &str, path: &Path) -> Option<WorkerError> {
        #[derive(Deserialize)]
        struct File {
            message: Message,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Message {
            Structured {
                message: String,
                #[serde(rename = "extraInfo", default)]
                extra: Option<Extra>,
            },
            Plain(String),
        }
        #[derive(Deserialize)]
        struct Extra {
            py_callstack: Option<String>,
        }
        let file: File = serde_json::from_str(text).ok()?;
        let (message, callstack) = match file.message {
            Message::Structured { message, extra } => (message, extra.and_then(|e| e.py_callstack)),
            Message::Plain(message) => (message, None),
        };
        let traceback = callstack
            .filter(|t| !t.trim().is_empty() && t.trim() != "NoneType: None")
            .map(|t| tail(&t, MAX_TRACEBACK));
        Some(WorkerError {
            exception: exception_type(&message),
            frame: traceback.as_deref().and_then(innermost_frame),
            message,
            traceback,
            error_file: path.to_owned(),
        })
    }

    /// The message's first line, at most 300 characters: for one-line summaries.
    pub fn headline(&self) -> String {
        let first = self.message.lines().next().unwrap_or("").trim_end();
        if first.chars().count() > 300 {
            let cut: String = first.chars().take(300).collect();
            format!("{cut}…")
        } else {
            first.to_owned()
        }
    }
}

/// `ValueError` of `ValueError: bad shard 7`; dotted names (`torch.OutOfMemoryError`) too.
fn exception_type(message: &str) -> Option<String> {
    let (name, _) = message.split_once(':')?;
    let ok = !name.is_empty()
        && name.split('.').all(|part| {
            let mut c = part.chars();
            c.next().is_some_and(|f| f.is_alphabetic() || f == '_')
                && c.all(|ch| ch.is_alphanumeric() || ch == '_')
        });
    ok.then(|| name.to_owned())
}

/// The last `  File "…", line N, in F` of a traceback, with the source line after it.
/// In a chained traceback ("During handling of the above exception…") the last block is
/// the exception that escaped, so its last frame is the innermost one.
pub fn innermost_frame(traceback: &str) -> Option<Frame> {
    let lines: Vec<&str> = traceback.lines().collect();
    let (i, frame_line) = lines
        .iter()
        .enumerate()
        .rev()
        .find(|(_, l)| l.trim_start().starts_with("File \""))?;
    let rest = frame_line.trim_start().strip_prefix("File \"")?;
    let (file, rest) = rest.split_once("\", line ")?;
    let (line, function) = rest.split_once(", in ")?;
    let code = lines
        .get(i + 1)
        .map(|l| l.trim())
        .filter(|l| {
            !l.is_empty()
                && !l.starts_with("File \"")
                && !l.chars().all(|c| matches!(c, '^' | '~' | ' '))
                && lines[i + 1].starts_with("    ")
        })
        .map(str::to_owned);
    Some(Frame {
        file: file.to_owned(),
        line: line.trim().parse().ok()?,
        function: function.trim().to_owned(),
        code,
    })
}

/// The last `max` bytes of `text`, cut at a character boundary.
fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &text[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What torch 2.15's `@record` wrote for a `ValueError` raised two calls deep (Python
    /// 3.11, with its `^^^` markers; only the venv's and the script's folders renamed).
    const RECORDED: &str = r#"{"message": {"message": "ValueError: bad shard 7", "extraInfo": {"py_callstack": "Traceback (most recent call last):\n  File \"/venv/lib/python3.11/site-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py\", line 384, in wrapper\n    result = f(*args, **kwargs)\n             ^^^^^^^^^^^^^^^^^^\n  File \"/exp/code/fail.py\", line 11, in main\n    load_shard(7)\n  File \"/exp/code/fail.py\", line 6, in load_shard\n    raise ValueError(f\"bad shard {i}\")\nValueError: bad shard 7\n", "timestamp": "1796107598"}}}"#;

    #[test]
    fn reads_what_record_writes() {
        let e = WorkerError::parse(RECORDED, Path::new("/x/rank-4.error.json")).expect("parse");
        assert_eq!(e.message, "ValueError: bad shard 7");
        assert_eq!(e.exception.as_deref(), Some("ValueError"));
        let f = e.frame.expect("frame");
        assert_eq!(f.file, "/exp/code/fail.py");
        assert_eq!(f.line, 6);
        assert_eq!(f.function, "load_shard");
        assert_eq!(
            f.code.as_deref(),
            Some("raise ValueError(f\"bad shard {i}\")")
        );
        assert_eq!(
            e.traceback
                .as_deref()
                .map(|t| t.ends_with("ValueError: bad shard 7\n")),
            Some(true)
        );
    }

    #[test]
    fn plain_messages_markers_and_chains() {
        let e = WorkerError::parse(
            r#"{"message": "RuntimeError: boom", "timestamp": "1"}"#,
            Path::new("e"),
        )
        .expect("plain message");
        assert_eq!(e.exception.as_deref(), Some("RuntimeError"));
        assert_eq!(e.frame, None);
        assert_eq!(e.traceback, None);

        // The source line is a marker-only line in some tracebacks: no code then.
        let tb = "Traceback (most recent call last):\n  File \"a.py\", line 3, in <module>\n    ^^^^\nKeyError: 'x'\n";
        let f = innermost_frame(tb).expect("frame");
        assert_eq!((f.line, f.function.as_str(), f.code), (3, "<module>", None));

        // Chained: the frame of the exception that escaped, not of its cause.
        let chained = "Traceback (most recent call last):\n  File \"a.py\", line 3, in f\n    x[1]\nIndexError: list index out of range\n\nDuring handling of the above exception, another exception occurred:\n\nTraceback (most recent call last):\n  File \"a.py\", line 9, in g\n    raise ValueError('wrapped')\nValueError: wrapped\n";
        let f = innermost_frame(chained).expect("frame");
        assert_eq!((f.line, f.function.as_str()), (9, "g"));

        assert_eq!(
            exception_type("torch.OutOfMemoryError: CUDA out of memory").as_deref(),
            Some("torch.OutOfMemoryError")
        );
        assert_eq!(exception_type("no type here"), None);
        assert_eq!(exception_type("a b: c"), None);
    }

    #[test]
    fn other_files_are_not_errors() {
        for text in ["", "not json", "{}", r#"{"message": 3}"#] {
            assert_eq!(WorkerError::parse(text, Path::new("e")), None, "{text}");
        }
    }

    #[test]
    fn long_messages_and_tracebacks_are_cut() {
        let long = format!(
            r#"{{"message": {{"message": "ValueError: {}\nsecond line", "extraInfo": {{"py_callstack": "{}"}}}}}}"#,
            "é".repeat(400),
            "x".repeat(3 * MAX_TRACEBACK)
        );
        let e = WorkerError::parse(&long, Path::new("e")).expect("parse");
        assert_eq!(e.headline().chars().count(), 301, "300 characters and …");
        assert!(!e.headline().contains("second line"));
        let tb = e.traceback.expect("traceback");
        assert!(tb.len() <= MAX_TRACEBACK + '…'.len_utf8(), "{}", tb.len());
    }
}
