//! SwAV's training log lines (facebookresearch/swav main_swav.py and main_deepclusterv2.py
//! `train`; eval_linear.py `train`).

use crate::read::text::{norm, num, step_of, strip_ansi};
use crate::Record;

pub(crate) fn line(line: &str) -> Option<Record> {
    let at = line.find("Epoch")?;
    let rest = &line[at + "Epoch".len()..];
    if !(rest.starts_with(": [") || rest.starts_with('[')) {
        return None;
    }
    let t = strip_ansi(line);
    let at = t.find("Epoch")?;
    let rest = &t[at + "Epoch".len()..];
    if let Some(r) = rest.strip_prefix(": [") {
        // `Epoch: [0][50]\tTime …`
        let (epoch, r) = r.split_once("][")?;
        let (iter, fields) = r.split_once(']')?;
        let mut values = vec![
            ("epoch".to_owned(), num(epoch)?),
            ("iter".to_owned(), num(iter)?),
        ];
        let n = values.len();
        read_fields(fields, &mut values);
        (values.len() > n).then_some(Record { step: None, values })
    } else {
        // eval_linear.py: `Epoch[0] - Iter: [50/5005]\tTime …`: the iterations per epoch
        // give a global step
        let r = rest.strip_prefix('[')?;
        let (epoch, r) = r.split_once(']')?;
        let r = r.trim_start().strip_prefix("- Iter: [")?;
        let (pos, fields) = r.split_once(']')?;
        let (iter, per_epoch) = pos.split_once('/')?;
        let (epoch, iter, per_epoch) = (num(epoch)?, num(iter)?, num(per_epoch)?);
        let mut values = vec![("epoch".to_owned(), epoch), ("iter".to_owned(), iter)];
        let n = values.len();
        read_fields(fields, &mut values);
        (values.len() > n).then_some(Record {
            step: step_of(epoch * per_epoch + iter),
            values,
        })
    }
}

/// `Time 0.123 (0.456)\tData 0.01 (0.02)\tLoss 8.0000 (8.1000)\tLr: 0.3000`: a name, its
/// value, the running average in parentheses.
fn read_fields(fields: &str, values: &mut Vec<(String, f64)>) {
    let mut name = String::new();
    let mut last: Option<String> = None;
    for tok in fields.split_whitespace() {
        if let Some(avg) = tok.strip_prefix('(').and_then(|t| t.strip_suffix(')')) {
            if let (Some(n), Some(v)) = (&last, num(avg)) {
                values.push((avg_name(n), v));
            }
            last = None;
            continue;
        }
        if let Some(v) = num(tok) {
            if !name.is_empty() {
                let n = value_name(&name);
                values.push((n.clone(), v));
                last = Some(n);
                name.clear();
            }
            continue;
        }
        if !name.is_empty() {
            name.push(' ');
        }
        name.push_str(tok.trim_end_matches(':'));
        last = None;
    }
}

fn value_name(label: &str) -> String {
    match label {
        "Time" => "batch_time_s".to_owned(),
        "Data" => "data_time_s".to_owned(),
        "Loss" => "loss".to_owned(),
        "Lr" | "LR" => "lr".to_owned(),
        l => norm(l),
    }
}

fn avg_name(name: &str) -> String {
    match name.strip_suffix("_s") {
        Some(base) if name.ends_with("_time_s") => format!("{base}_avg_s"),
        _ => format!("{name}_avg"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vals(values: &[(&str, f64)]) -> Vec<(String, f64)> {
        values.iter().map(|(n, v)| (n.to_string(), *v)).collect()
    }

    #[test]
    fn main_swav() {
        // src/logger.py LogFormatter: "%s - %s - %s" % (levelname, time.strftime("%x %X"), timedelta)
        assert_eq!(
            line("INFO - 12/01/20 14:00:00 - 0:01:23 - Epoch: [0][50]\tTime 0.123 (0.456)\tData 0.010 (0.020)\tLoss 8.0000 (8.1000)\tLr: 0.3000"),
            Some(Record {
                step: None,
                values: vals(&[
                    ("epoch", 0.0),
                    ("iter", 50.0),
                    ("batch_time_s", 0.123),
                    ("batch_time_avg_s", 0.456),
                    ("data_time_s", 0.01),
                    ("data_time_avg_s", 0.02),
                    ("loss", 8.0),
                    ("loss_avg", 8.1),
                    ("lr", 0.3),
                ])
            })
        );
        // tabs turned into spaces on the way still read
        assert_eq!(
            line("Epoch: [3][1250] Time 0.500 (0.510) Data 0.001 (0.002) Loss 6.5000 (6.6000) Lr: 4.8000"),
            Some(Record {
                step: None,
                values: vals(&[
                    ("epoch", 3.0),
                    ("iter", 1250.0),
                    ("batch_time_s", 0.5),
                    ("batch_time_avg_s", 0.51),
                    ("data_time_s", 0.001),
                    ("data_time_avg_s", 0.002),
                    ("loss", 6.5),
                    ("loss_avg", 6.6),
                    ("lr", 4.8),
                ])
            })
        );
    }

    #[test]
    fn eval_linear() {
        assert_eq!(
            line("INFO - 12/01/20 14:00:00 - 1:00:00 - Epoch[2] - Iter: [100/5005]\tTime 0.200 (0.210)\tData 0.050 (0.060)\tLoss 1.2000 (1.3000)\tPrec 70.000 (68.500)\tLR 0.3"),
            Some(Record {
                step: Some(2 * 5005 + 100),
                values: vals(&[
                    ("epoch", 2.0),
                    ("iter", 100.0),
                    ("batch_time_s", 0.2),
                    ("batch_time_avg_s", 0.21),
                    ("data_time_s", 0.05),
                    ("data_time_avg_s", 0.06),
                    ("loss", 1.2),
                    ("loss_avg", 1.3),
                    ("prec", 70.0),
                    ("prec_avg", 68.5),
                    ("lr", 0.3),
                ])
            })
        );
    }

    #[test]
    fn not_metrics() {
        for l in [
            "INFO - 12/01/20 14:00:00 - 0:00:05 - ============ Starting epoch 0 ... ============",
            "INFO - 12/01/20 14:00:00 - 0:00:05 - Epoch: [0][50]",
            "INFO - 12/01/20 14:00:00 - 0:00:05 - Building data done with 1281167 images loaded.",
            "Epoch 3 done",
        ] {
            assert_eq!(line(l), None, "{l}");
        }
    }
}
