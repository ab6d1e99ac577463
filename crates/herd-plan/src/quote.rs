//! POSIX shell quoting for the words herd writes into batch scripts.
//!
//! Every user value (the command and its arguments, paths, names) is written as one
//! single-quoted word: inside `'…'` a POSIX shell expands nothing (no `$`, backtick, glob,
//! `~`, backslash or newline handling), so the word reaches the program byte for byte. A
//! `'` inside the value ends the quote, adds an escaped `\'`, and starts a new quote. The
//! only byte no shell word can carry is NUL (no program argument can hold one either);
//! [`quote`] refuses it.

/// A value that cannot be a shell word.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} contains a NUL byte, which no program argument can hold")]
pub struct NulError {
    /// The value, described for the message (e.g. "command argument 3").
    pub what: String,
}

/// `word` as one single-quoted POSIX shell word: `it's` → `'it'\''s'`, `` → `''`.
///
/// Always quotes, even words that would be safe bare, so no rule about which bytes are
/// special to a shell ever matters. `what` names the value in the error when `word`
/// contains NUL.
pub fn quote(word: &str, what: &str) -> Result<String, NulError> {
    if word.contains('\0') {
        return Err(NulError {
            what: what.to_owned(),
        });
    }
    let mut out = String::with_capacity(word.len() + 2);
    out.push('\'');
    for c in word.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    Ok(out)
}

/// `word` bare when it is made only of letters, digits and `@%+=:,./_-` (Python's
/// `shlex.quote` leaves those bare too: no POSIX shell gives them a meaning), else
/// [`quote`]d: herd's own flags and typed values read as they are typed (`--max-requeues 3`),
/// anything else is one single-quoted word.
pub fn quote_if_needed(word: &str, what: &str) -> Result<String, NulError> {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "@%+=:,./_-".contains(c));
    if plain {
        Ok(word.to_owned())
    } else {
        quote(word, what)
    }
}

/// Each of `words` quoted with [`quote`], joined by single spaces. `what` names the list in
/// an error ("command argument N").
pub fn quote_words<S: AsRef<str>>(words: &[S], what: &str) -> Result<String, NulError> {
    let quoted = words
        .iter()
        .enumerate()
        .map(|(i, w)| quote(w.as_ref(), &format!("{what} {}", i + 1)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(quoted.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::process::Command;

    fn q(s: &str) -> String {
        quote(s, "word").unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn quotes() {
        assert_eq!(q(""), "''");
        assert_eq!(q("abc"), "'abc'");
        assert_eq!(q("it's"), "'it'\\''s'");
        assert_eq!(q("'"), "''\\'''");
        assert_eq!(q("$(rm -rf /)"), "'$(rm -rf /)'");
        assert!(
            quote("a\0b", "command argument 2").is_err_and(|e| e.to_string()
                == "command argument 2 contains a NUL byte, which no program argument can hold")
        );
        assert_eq!(
            quote_words(&["a", "b c"], "x").unwrap_or_default(),
            "'a' 'b c'"
        );
    }

    /// What bash makes of `printf '%s\0' WORDS…`: the words as the program received them.
    /// Bash runs in a fresh folder that must still be empty afterwards: no word ran a
    /// command (`$(touch pwned)`) or redirected output (`>out`).
    fn through_bash(words: &[String]) -> Vec<String> {
        let cwd = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        // A first word so that printf runs its format at least once even for no words.
        let script = format!(
            "printf '%s\\0' start {}",
            quote_words(words, "word").unwrap_or_else(|e| panic!("{e}"))
        );
        let out = Command::new("bash")
            .arg("-c")
            .arg(&script)
            .current_dir(cwd.path())
            .output()
            .unwrap_or_else(|e| panic!("cannot run bash: {e}"));
        assert!(out.status.success(), "bash failed on {script:?}");
        let made: Vec<_> = std::fs::read_dir(cwd.path())
            .unwrap_or_else(|e| panic!("{e}"))
            .collect();
        assert!(made.is_empty(), "{script:?} made {made:?}");
        let mut got: Vec<String> = out
            .stdout
            .split(|b| *b == 0)
            .map(|w| String::from_utf8_lossy(w).into_owned())
            .collect();
        // printf ends every word with NUL, so the split leaves one empty tail.
        assert_eq!(got.pop().as_deref(), Some(""));
        assert_eq!(got.first().map(String::as_str), Some("start"));
        got.remove(0);
        got
    }

    #[test]
    fn nasty_words_survive_bash() {
        let words: Vec<String> = [
            "",
            " ",
            "a b",
            "'",
            "''",
            "\"",
            "\\",
            "\\'",
            "$(touch pwned)",
            "`touch ticked`",
            "`id`",
            "${HOME}",
            "$HOME",
            "*",
            "?",
            "[a-z]*",
            "~",
            "~root",
            "a\nb",
            "\n",
            "\t",
            "héllo wörld ✓ 日本語",
            "!!",
            "#comment",
            ";",
            "&&",
            "|",
            ">out",
            "-e",
            "-n",
            "--",
            "{a,b}",
            "\r\n",
            "\u{7f}\u{1b}[31m",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // printf with `%s` takes `-e`/`-n`/`--` as data only after the format; they are.
        assert_eq!(through_bash(&words), words);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        #[test]
        fn any_words_round_trip_through_bash(
            words in proptest::collection::vec("[^\u{0}]{0,12}|[ -~\n\t]{0,16}|['\"$`\\\\*?~!#;&|<>(){} \n]{0,8}", 0..6)
        ) {
            prop_assert_eq!(through_bash(&words), words);
        }
    }
}
