//! A user's regular expression (`regex:RE`).

use crate::read::text::{num, step_of, strip_ansi};
use crate::Record;

pub(crate) struct Pattern {
    re: regex::Regex,
    /// The named groups other than `step`, in the expression's order.
    names: Vec<String>,
    has_step: bool,
}

impl Pattern {
    pub(crate) fn new(re: &str) -> Option<Pattern> {
        let re = regex::Regex::new(re).ok()?;
        let names: Vec<String> = re.capture_names().flatten().map(str::to_owned).collect();
        let has_step = names.iter().any(|n| n == "step");
        let names = names.into_iter().filter(|n| n != "step").collect();
        Some(Pattern {
            re,
            names,
            has_step,
        })
    }

    pub(crate) fn line(&self, line: &str) -> Option<Record> {
        let t = strip_ansi(line);
        let caps = self.re.captures(&t)?;
        let step = if self.has_step {
            caps.name("step")
                .and_then(|m| num(m.as_str()))
                .and_then(step_of)
        } else {
            None
        };
        let values: Vec<(String, f64)> = self
            .names
            .iter()
            .filter_map(|n| Some((n.clone(), num(caps.name(n)?.as_str())?)))
            .collect();
        if values.is_empty() && step.is_none() {
            return None;
        }
        Some(Record { step, values })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_groups() {
        let p =
            Pattern::new(r"it (?P<step>\d+): loss=(?P<loss>\S+) acc=(?P<acc>\S+)(?: (?P<lr>\S+))?")
                .expect("compiles");
        assert_eq!(
            p.line("\x1b[1m[rank0]: it 12: loss=0.25 acc=nan\x1b[0m"),
            Some(Record {
                step: Some(12),
                values: vec![("loss".into(), 0.25)],
            })
        );
        assert_eq!(
            p.line("it 13: loss=0.2 acc=0.9 1.0E-3"),
            Some(Record {
                step: Some(13),
                values: vec![
                    ("loss".into(), 0.2),
                    ("acc".into(), 0.9),
                    ("lr".into(), 1e-3)
                ],
            })
        );
        assert_eq!(p.line("it x: loss=0.2 acc=0.9"), None);
        assert_eq!(
            p.line("it 14: loss=a acc=b"),
            Some(Record {
                step: Some(14),
                values: vec![]
            })
        );
        let p = Pattern::new(r"val_acc (?<val_acc>[\d.]+)").expect("compiles");
        assert_eq!(
            p.line("epoch end val_acc 0.75"),
            Some(Record {
                step: None,
                values: vec![("val_acc".into(), 0.75)],
            })
        );
        assert!(Pattern::new("(unclosed").is_none());
    }
}
