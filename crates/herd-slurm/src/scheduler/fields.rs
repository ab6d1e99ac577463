//! The one reader of `scontrol -o` output (`show job`, `show partition`, `show node`): a
//! record per line, `Key=Value` fields separated by spaces.
//!
//! scontrol does not quote values, so a value may hold spaces (`Command=/a b/train.py`,
//! `OS=Linux 5.15.0 #1 SMP`) and `=` (`TRES=cpu=1,mem=1000M`, `Command=/x --a=b`). A word
//! starts a new field when the text before its first `=` looks like a scontrol key (a
//! letter, then letters, digits, `_`, `/` or `:`, as in `CPUs/Task` or `ReqB:S:C:T`); any
//! other word belongs to the value before it. A value word shaped like a key (`lr=0.1` in a
//! `Command=`) cannot be told from one and starts a field of its own.

/// The `Key=Value` fields of one `scontrol -o` record, in the order printed, each value as
/// it stands in `line` (spaces inside it kept). Words before the first key are left out.
pub fn fields(line: &str) -> Vec<(&str, &str)> {
    let mut out: Vec<(&str, &str)> = Vec::new();
    // Where the current field's value starts and ends in `line`, to slice it whole.
    let mut open: Option<(&str, usize, usize)> = None;
    for word in line.split_whitespace() {
        let start = word.as_ptr() as usize - line.as_ptr() as usize;
        match word.split_once('=') {
            Some((key, _)) if is_key(key) => {
                if let Some((k, from, to)) = open.take() {
                    out.push((k, &line[from..to]));
                }
                let from = start + key.len() + 1;
                open = Some((key, from, start + word.len()));
            }
            _ => {
                if let Some((_, _, to)) = open.as_mut() {
                    *to = start + word.len();
                }
            }
        }
    }
    if let Some((k, from, to)) = open {
        out.push((k, &line[from..to]));
    }
    out
}

/// Whether `key` has the shape of a scontrol key (`JobState`, `CPUs/Task`, `ReqB:S:C:T`,
/// `MCS_label`).
fn is_key(key: &str) -> bool {
    key.starts_with(|c: char| c.is_ascii_alphabetic())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'/' | b':'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_may_hold_spaces() {
        assert_eq!(
            fields("JobId=7 Command=/a b/train.py --steps 10 WorkDir=/w x"),
            [
                ("JobId", "7"),
                ("Command", "/a b/train.py --steps 10"),
                ("WorkDir", "/w x")
            ]
        );
        assert_eq!(
            fields("NodeName=gpu-a01 OS=Linux 5.15.0-91-generic #101-Ubuntu SMP  RealMemory=16000"),
            [
                ("NodeName", "gpu-a01"),
                ("OS", "Linux 5.15.0-91-generic #101-Ubuntu SMP"),
                ("RealMemory", "16000")
            ]
        );
    }

    #[test]
    fn values_may_be_empty() {
        assert_eq!(
            fields("Power= Comment= JobId=1 StdIn="),
            [
                ("Power", ""),
                ("Comment", ""),
                ("JobId", "1"),
                ("StdIn", "")
            ]
        );
        assert!(fields("").is_empty());
        assert!(fields("   \t ").is_empty());
    }

    #[test]
    fn values_may_hold_equals_signs() {
        assert_eq!(
            fields("TRES=cpu=1,mem=1000M,node=1 Command=/x --a=b --c==d StdOut=/o"),
            [
                ("TRES", "cpu=1,mem=1000M,node=1"),
                ("Command", "/x --a=b --c==d"),
                ("StdOut", "/o")
            ]
        );
        assert_eq!(
            fields("Command=/x =y /p=q"),
            [("Command", "/x =y /p=q")],
            "`=y` and `/p=q` are no keys"
        );
    }

    #[test]
    fn keys_have_scontrols_shapes() {
        assert_eq!(
            fields("CPUs/Task=1 ReqB:S:C:T=0:0:*:* MCS_label=N/A NtasksPerTRES:0"),
            [
                ("CPUs/Task", "1"),
                ("ReqB:S:C:T", "0:0:*:*"),
                ("MCS_label", "N/A NtasksPerTRES:0")
            ]
        );
        assert_eq!(
            fields("slurm_load_jobs error: Invalid job id specified"),
            [],
            "no key at all"
        );
        assert_eq!(
            fields("Command=train.py lr=0.1"),
            [("Command", "train.py"), ("lr", "0.1")],
            "a value word shaped like a key starts a field"
        );
    }

    #[test]
    fn a_key_printed_twice_is_kept_twice_in_order() {
        assert_eq!(
            fields("JobState=RUNNING JobState=PENDING"),
            [("JobState", "RUNNING"), ("JobState", "PENDING")]
        );
    }
}
