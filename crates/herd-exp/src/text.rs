//! Byte strings that need not be UTF-8 (arguments, paths, diffs), kept without loss.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// A byte string (an argument, a path, a diff) as the manifest stores it, without loss.
///
/// In JSON it is a plain string when the bytes are UTF-8, and `{"escaped": "…"}` when they
/// are not: the UTF-8 parts as they are, a backslash as `\\`, every byte that is not part of
/// valid UTF-8 as `\xNN` (two lowercase hex digits). [`LosslessText::to_bytes`] gives the
/// original bytes back.
///
/// ```
/// use std::ffi::OsStr;
/// use std::os::unix::ffi::OsStrExt;
/// use herd_exp::LosslessText;
///
/// let arg = OsStr::from_bytes(b"caf\xe9 \\ ok");
/// let text = LosslessText::from(arg);
/// assert_eq!(serde_json::to_string(&text).unwrap(), r#"{"escaped":"caf\\xe9 \\\\ ok"}"#);
/// assert_eq!(text.to_os_string().unwrap(), arg);
/// assert_eq!(LosslessText::from(OsStr::new("plain")), LosslessText::Utf8("plain".into()));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum LosslessText {
    /// Valid UTF-8, stored as it is.
    Utf8(String),
    /// Not valid UTF-8, stored escaped.
    Escaped {
        /// The bytes, escaped as the type's documentation says.
        escaped: String,
    },
}

/// An `{"escaped": …}` value whose escapes are malformed (only `\\` and `\xNN` exist).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed escaped text {escaped:?}: only `\\\\` and `\\xNN` escapes exist")]
pub struct BadEscape {
    /// The malformed text.
    pub escaped: String,
}

impl LosslessText {
    /// The text for these bytes: [`LosslessText::Utf8`] when they are UTF-8.
    pub fn from_bytes(bytes: &[u8]) -> Self {
        match std::str::from_utf8(bytes) {
            Ok(s) => LosslessText::Utf8(s.to_owned()),
            Err(_) => LosslessText::Escaped {
                escaped: escape(bytes, false),
            },
        }
    }

    /// The original bytes.
    pub fn to_bytes(&self) -> Result<Vec<u8>, BadEscape> {
        match self {
            LosslessText::Utf8(s) => Ok(s.as_bytes().to_vec()),
            LosslessText::Escaped { escaped } => unescape(escaped).ok_or_else(|| BadEscape {
                escaped: escaped.clone(),
            }),
        }
    }

    /// The original bytes as an `OsString` (an argument, a path).
    pub fn to_os_string(&self) -> Result<OsString, BadEscape> {
        self.to_bytes().map(OsString::from_vec)
    }

    /// The text for display: UTF-8 as it is, anything else replaced by U+FFFD.
    pub fn to_string_lossy(&self) -> String {
        match self.to_bytes() {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(_) => String::new(),
        }
    }
}

impl From<&OsStr> for LosslessText {
    fn from(s: &OsStr) -> Self {
        LosslessText::from_bytes(s.as_bytes())
    }
}

impl From<&Path> for LosslessText {
    fn from(p: &Path) -> Self {
        LosslessText::from(p.as_os_str())
    }
}

impl From<&str> for LosslessText {
    fn from(s: &str) -> Self {
        LosslessText::Utf8(s.to_owned())
    }
}

/// Escapes `bytes`: valid UTF-8 as it is, `\` as `\\`, other bytes as `\xNN`; with
/// `controls`, also ASCII control characters (so the result is one line).
pub(crate) fn escape(bytes: &[u8], controls: bool) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(bytes.len() + 8);
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                c if controls && (c.is_ascii_control()) => {
                    let _ = write!(out, "\\x{:02x}", c as u32);
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// Reverses [`escape`]; `None` when `s` has an escape other than `\\` and `\xNN`.
pub(crate) fn unescape(s: &str) -> Option<Vec<u8>> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            out.push(bytes[i]);
            i += 1;
            continue;
        }
        match bytes.get(i + 1) {
            Some(b'\\') => {
                out.push(b'\\');
                i += 2;
            }
            Some(b'x') => {
                let hex = bytes.get(i + 2..i + 4)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 4;
            }
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let cases: &[&[u8]] = &[
            b"",
            b"plain",
            b"back\\slash",
            b"\\x41",
            b"\xff\xfe",
            b"caf\xc3\xa9 \xe9",
            b"line\nbreak\ttab\x7f\x00",
            "unicode ✓".as_bytes(),
        ];
        for &case in cases {
            for controls in [false, true] {
                let e = escape(case, controls);
                assert_eq!(unescape(&e).as_deref(), Some(case), "{e}");
                if controls {
                    assert!(!e.contains('\n') && !e.contains('\0'), "{e}");
                }
            }
            let t = LosslessText::from_bytes(case);
            let json = serde_json::to_string(&t).expect("serialize");
            let back: LosslessText = serde_json::from_str(&json).expect("deserialize");
            assert_eq!(back.to_bytes().as_deref(), Ok(case));
        }
    }

    #[test]
    fn rejects_bad_escapes() {
        assert_eq!(unescape("a\\n"), None);
        assert_eq!(unescape("a\\x4"), None);
        assert_eq!(unescape("a\\xzz"), None);
        assert_eq!(unescape("a\\"), None);
    }
}
