//! Metrics files some trainers write instead of (or besides) printing them.

use crate::read::json;
use crate::read::text::{norm, num, step_of};
use crate::Record;

/// mmengine's `scalars.json` (`LocalVisBackend.add_scalars`, mmengine/visualization/
/// vis_backend.py): a JSON object a line, `step` among its keys (`epoch`, `iter` too in
/// training lines). Names are normalised as other trainers' (`coco/bbox_mAP` →
/// `coco_bbox_map`); lines that are not such an object are skipped.
pub fn read_scalars_json(text: &str) -> Vec<Record> {
    text.lines()
        .filter_map(|l| json::object(l.trim(), true))
        .collect()
}

/// Lightning's `CSVLogger` `metrics.csv` (lightning/fabric/loggers/csv_logs.py
/// `_ExperimentWriter.save`, a `csv.DictWriter`): a header row, then a row per logging
/// call with empty cells for the metrics that call did not log. One record per row with
/// its numeric cells; the `step` column is the step, names are normalised (`lr-SGD` →
/// `lr_sgd`). Quoted cells (`"a,b"`, `""` for a quote) are read; a cell spanning lines is
/// not (Lightning writes numbers). Rows without a number besides the step are skipped.
pub fn read_lightning_csv(text: &str) -> Vec<Record> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let names: Vec<String> = cells(header.trim_start_matches('\u{feff}'))
        .iter()
        .map(|c| norm(c))
        .collect();
    let mut out = Vec::new();
    for row in lines {
        let mut step = None;
        let mut values = Vec::new();
        for (name, cell) in names.iter().zip(cells(row)) {
            let Some(v) = num(&cell) else { continue };
            if name == "step" {
                step = step_of(v);
            } else {
                values.push((name.clone(), v));
            }
        }
        if !values.is_empty() {
            out.push(Record { step, values });
        }
    }
    out
}

/// The cells of one CSV row.
fn cells(row: &str) -> Vec<String> {
    let row = row.strip_suffix('\r').unwrap_or(row);
    let mut out = Vec::new();
    let mut cell = String::new();
    let mut quoted = false;
    let mut chars = row.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted => {
                if chars.peek() == Some(&'"') {
                    chars.next();
                    cell.push('"');
                } else {
                    quoted = false;
                }
            }
            '"' if cell.is_empty() => quoted = true,
            ',' if !quoted => out.push(std::mem::take(&mut cell)),
            c => cell.push(c),
        }
    }
    out.push(cell);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vals(values: &[(&str, f64)]) -> Vec<(String, f64)> {
        values.iter().map(|(n, v)| (n.to_string(), *v)).collect()
    }

    #[test]
    fn scalars_json() {
        let text = r#"{"lr": 0.02, "data_time": 0.0059, "loss": 1.6094, "loss_cls": 0.9431, "time": 0.3617, "epoch": 1, "iter": 50, "memory": 3884, "step": 50}
{"lr": 0.02, "data_time": 0.0041, "loss": NaN, "time": 0.35, "epoch": 1, "iter": 100, "memory": 3884, "step": 100}
not json
{"coco/bbox_mAP": 0.374, "coco/bbox_mAP_50": 0.581, "data_time": 0.0036, "time": 0.0887, "step": 1}

"#;
        assert_eq!(
            read_scalars_json(text),
            vec![
                Record {
                    step: Some(50),
                    values: vals(&[
                        ("lr", 0.02),
                        ("data_time", 0.0059),
                        ("loss", 1.6094),
                        ("loss_cls", 0.9431),
                        ("time", 0.3617),
                        ("epoch", 1.0),
                        ("iter", 50.0),
                        ("memory", 3884.0),
                    ]),
                },
                Record {
                    step: Some(100),
                    values: vals(&[
                        ("lr", 0.02),
                        ("data_time", 0.0041),
                        ("time", 0.35),
                        ("epoch", 1.0),
                        ("iter", 100.0),
                        ("memory", 3884.0),
                    ]),
                },
                Record {
                    step: Some(1),
                    values: vals(&[
                        ("coco_bbox_map", 0.374),
                        ("coco_bbox_map_50", 0.581),
                        ("data_time", 0.0036),
                        ("time", 0.0887),
                    ]),
                },
            ]
        );
    }

    #[test]
    fn lightning_csv() {
        let text = "epoch,step,train_loss_step,lr-SGD,val_loss,val_acc,train_loss_epoch\r\n\
                    0,49,2.3012,,,,\r\n\
                    0,49,,0.1,,,\r\n\
                    0,99,1.9876,,,,\r\n\
                    0,99,,,1.8001,0.4125,\r\n\
                    0,99,,,,,2.0500\r\n\
                    1,149,nan,,,,\r\n\
                    ,,,,,,\r\n";
        assert_eq!(
            read_lightning_csv(text),
            vec![
                Record {
                    step: Some(49),
                    values: vals(&[("epoch", 0.0), ("train_loss_step", 2.3012)]),
                },
                Record {
                    step: Some(49),
                    values: vals(&[("epoch", 0.0), ("lr_sgd", 0.1)]),
                },
                Record {
                    step: Some(99),
                    values: vals(&[("epoch", 0.0), ("train_loss_step", 1.9876)]),
                },
                Record {
                    step: Some(99),
                    values: vals(&[("epoch", 0.0), ("val_loss", 1.8001), ("val_acc", 0.4125)]),
                },
                Record {
                    step: Some(99),
                    values: vals(&[("epoch", 0.0), ("train_loss_epoch", 2.05)]),
                },
                Record {
                    step: Some(149),
                    values: vals(&[("epoch", 1.0)]),
                },
            ]
        );
    }

    #[test]
    fn csv_quoting() {
        assert_eq!(
            cells(r#"a,"b,c","d""e",,"#),
            vec!["a", "b,c", "d\"e", "", ""]
        );
        let text = "step,\"loss, smoothed\",note\n3,\"0.5\",hello\n";
        assert_eq!(
            read_lightning_csv(text),
            vec![Record {
                step: Some(3),
                values: vals(&[("loss_smoothed", 0.5)]),
            }]
        );
        assert_eq!(read_lightning_csv(""), vec![]);
        assert_eq!(read_lightning_csv("step,loss\n"), vec![]);
    }
}
