//! `after`: the jobs a submission waits for, by name or id, resolved into sbatch's
//! `--dependency` and checked with SLURM before anything is written (docs/submit.md,
//! docs/slurm.md).

use herd_slurm::scheduler::command::QUERY_TIMEOUT;
use herd_slurm::scheduler::queue::{self, QueueRow, Scope};

use crate::site::is_job_id;

/// An `after` entry `NAME|ID[:ok|any|notok]` as (target, kind); the kind defaults to `ok`.
fn split_after(entry: &str) -> (&str, &str) {
    match entry.rsplit_once(':') {
        Some((t, k @ ("ok" | "any" | "notok"))) => (t, k),
        _ => (entry, "ok"),
    }
}

/// Resolve `after` entries (`NAME|ID[:ok|any|notok]`) into sbatch's `--dependency`, with at
/// most two squeue queries: this user's jobs when a job is named, the jobs given by id when
/// one is. A name that matches no job or several, and an id SLURM no longer knows or whose
/// end can never meet the dependency, is a finding.
pub fn dependency(after: &[String]) -> Result<Option<String>, Vec<String>> {
    if after.is_empty() {
        return Ok(None);
    }
    let targets: Vec<&str> = after.iter().map(|e| split_after(e).0).collect();
    let ids: Vec<String> = targets
        .iter()
        .filter(|t| is_job_id(t))
        .map(|t| (*t).to_owned())
        .collect();
    let mut mine = Vec::new();
    if targets.iter().any(|t| !is_job_id(t)) {
        match queue::query(Scope::Mine, QUERY_TIMEOUT) {
            Ok(rows) => mine = rows,
            Err(e) => {
                return Err(vec![format!(
                    "--after {}: cannot look up job names: {e}; give job ids instead, or try again",
                    after.join(",")
                )])
            }
        }
    }
    let mut given = Vec::new();
    if !ids.is_empty() {
        match queue::query(Scope::Jobs(&ids), QUERY_TIMEOUT) {
            Ok(rows) => given = rows,
            Err(e) => {
                return Err(vec![format!(
                    "--after {}: cannot look up jobs {}: {e}; try again",
                    after.join(","),
                    ids.join(", ")
                )])
            }
        }
    }
    after_ids(after, &mine, &given)
}

/// [`dependency`] from this user's queue `mine` and the rows of the jobs given by id
/// (`given`): a name matches the jobs of that name that have not ended (the query also
/// lists those that ended minutes ago), each by the id squeue's `%i` shows (`1234`, an
/// array task's `1234_5`).
fn after_ids(
    after: &[String],
    mine: &[QueueRow],
    given: &[QueueRow],
) -> Result<Option<String>, Vec<String>> {
    if after.is_empty() {
        return Ok(None);
    }
    let entries: Vec<(&str, &str)> = after.iter().map(|e| split_after(e)).collect();
    let jobs: Vec<(String, &str)> = mine
        .iter()
        .filter(|r| !r.job_state().is_final())
        .map(|r| (r.id(), r.name.as_str()))
        .collect();
    let mut problems = Vec::new();
    let mut by_kind: Vec<(&str, Vec<String>)> = Vec::new();
    for (entry, &(target, kind)) in after.iter().zip(&entries) {
        let ids: Vec<String> = if is_job_id(target) {
            if let Err(problem) = id_can_be_waited_for(entry, target, kind, given) {
                problems.push(problem);
                continue;
            }
            vec![target.to_owned()]
        } else {
            jobs.iter()
                .filter(|(_, name)| *name == target)
                .map(|(id, _)| id.clone())
                .collect()
        };
        match ids.len() {
            1 => {}
            0 => {
                let names: Vec<&str> = jobs.iter().map(|&(_, name)| name).collect();
                problems.push(format!(
                    "--after {entry}: no queued or running job of yours is named {target:?} (yours: {}); fix the name in `after`",
                    if names.is_empty() { "none".to_owned() } else { names.join(", ") }
                ));
                continue;
            }
            _ => {
                // Oldest first, as the user submitted them (squeue's order is its own).
                let mut ids = ids;
                ids.sort_by(|a, b| a.len().cmp(&b.len()).then_with(|| a.cmp(b)));
                problems.push(format!(
                    "--after {entry}: {} jobs are named {target:?} (ids {}); give the id instead",
                    ids.len(),
                    ids.join(", ")
                ));
                continue;
            }
        }
        let slurm_kind = match kind {
            "any" => "afterany",
            "notok" => "afternotok",
            _ => "afterok",
        };
        match by_kind.iter_mut().find(|(k, _)| *k == slurm_kind) {
            Some((_, v)) => v.extend(ids),
            None => by_kind.push((slurm_kind, ids)),
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(Some(
        by_kind
            .iter()
            .map(|(k, ids)| format!("{k}:{}", ids.join(":")))
            .collect::<Vec<_>>()
            .join(","),
    ))
}

/// Whether the job `id` (given by id in `entry`, dependency `kind`) can be waited for: SLURM
/// must still know it (sbatch refuses a dependency on a job it has forgotten from Slurm
/// 23.02, and 22.05 ran the job at once, so herd refuses it on every release), and a job
/// that has ended must have ended the way the dependency needs (else SLURM holds the new
/// job forever as `DependencyNeverSatisfied`).
fn id_can_be_waited_for(
    entry: &str,
    id: &str,
    kind: &str,
    rows: &[QueueRow],
) -> Result<(), String> {
    let of_id: Vec<&QueueRow> = rows
        .iter()
        .filter(|r| r.job_id == id || r.array_job_id == id)
        .collect();
    if of_id.is_empty() {
        return Err(format!(
            "--after {entry}: SLURM does not know job {id}: it never existed, or it ended long enough ago that slurmctld forgot it (after MinJobAge); a job that finished needs no waiting for, so remove it from `after`, or give a job that is queued or running"
        ));
    }
    if !of_id.iter().all(|r| r.job_state().is_final()) {
        return Ok(());
    }
    let completed = of_id.iter().all(|r| r.state == "COMPLETED");
    let ended: Vec<&str> = of_id.iter().map(|r| r.state.as_str()).collect();
    let never = match kind {
        "any" => false,
        "notok" => completed,
        _ => !completed,
    };
    if never {
        let wanted = if kind == "notok" {
            "to fail"
        } else {
            "to succeed"
        };
        return Err(format!(
            "--after {entry}: job {id} has ended ({}), so a dependency that waits for it {wanted} can never be met and SLURM would hold this job for ever; use `{id}:any`, or remove it from `after`",
            ended.join(", ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This user's queue as `squeue --states=all` lists it: a running and an ended
    /// `pretrain`, an array `sweep` (task 1 running, tasks 2-3 pending), two queued `eval`s,
    /// a failed `old`.
    const QUEUE: &str = "\
20|20|N/A|RUNNING|None|0:10|1:00|gpu-a01|1|0|me|(null)|2026-12-01T14:25:14|pretrain|
21|21|N/A|COMPLETED|None|0:10|1:00|gpu-a02|1|0|me|(null)|2026-12-01T14:20:14|pretrain|
23|22|1|RUNNING|None|0:05|1:00|gpu-a03|1|0|me|(null)|2026-12-01T14:25:20|sweep|
22|22|2-3|PENDING|JobArrayTaskLimit|0:00|1:00||1|0|me|(null)|N/A|sweep|
30|30|N/A|PENDING|Priority|0:00|1:00||1|0|me|(null)|N/A|eval|
31|31|N/A|PENDING|Priority|0:00|1:00||1|0|me|(null)|N/A|eval|
100|100|N/A|FAILED|NonZeroExitCode|0:02|1:00|gpu-a01|1|256|me|(null)|2026-12-01T14:00:00|old|
";

    /// Another user's running job, which `squeue --jobs` lists when it is given by id.
    const THEIRS: &str =
        "99|99|N/A|RUNNING|None|0:30|1:00|gpu-a02|1|0|other|(null)|2026-12-01T14:24:00|theirs|\n";

    fn after(entries: &[&str], queue: &str) -> Result<Option<String>, Vec<String>> {
        let mine = queue::parse(queue).expect("squeue output");
        let given = queue::parse(&format!("{queue}{THEIRS}")).expect("squeue output");
        let entries: Vec<String> = entries.iter().map(|e| (*e).to_owned()).collect();
        after_ids(&entries, &mine, &given)
    }

    #[test]
    fn a_name_matches_only_jobs_that_have_not_ended() {
        assert_eq!(
            after(&["pretrain"], QUEUE),
            Ok(Some("afterok:20".into())),
            "21, also named pretrain, has ended"
        );
        let one_eval = QUEUE.replace(
            "31|31|N/A|PENDING|Priority|0:00|1:00||1|0|me|(null)|N/A|eval|\n",
            "",
        );
        assert_eq!(
            after(&["pretrain:any", "99:notok", "eval"], &one_eval),
            Ok(Some("afterany:20,afternotok:99,afterok:30".into())),
            "kinds grouped, ids as given"
        );
    }

    #[test]
    fn an_array_task_is_named_by_its_array_and_task() {
        let one_task = "23|22|1|RUNNING|None|0:05|1:00|gpu-a03|1|0|me|(null)|N/A|sweep|\n";
        assert_eq!(after(&["sweep"], one_task), Ok(Some("afterok:22_1".into())));
        assert_eq!(
            after(&["sweep"], QUEUE),
            Err(vec![
                "--after sweep: 2 jobs are named \"sweep\" (ids 22_1, 22_[2-3]); give the id instead"
                    .to_owned()
            ])
        );
    }

    #[test]
    fn no_job_or_several_jobs_of_a_name_say_which_there_are() {
        assert_eq!(
            after(&["eval", "old:any"], QUEUE),
            Err(vec![
                "--after eval: 2 jobs are named \"eval\" (ids 30, 31); give the id instead".to_owned(),
                "--after old:any: no queued or running job of yours is named \"old\" (yours: pretrain, sweep, sweep, eval, eval); fix the name in `after`".to_owned(),
            ])
        );
        assert_eq!(
            after(&["pretrain"], ""),
            Err(vec![
                "--after pretrain: no queued or running job of yours is named \"pretrain\" (yours: none); fix the name in `after`".to_owned()
            ])
        );
        assert_eq!(after(&[], QUEUE), Ok(None));
    }

    #[test]
    fn an_id_slurm_has_forgotten_is_refused_before_anything_is_submitted() {
        assert_eq!(
            after(&["20", "4242"], QUEUE),
            Err(vec![
                "--after 4242: SLURM does not know job 4242: it never existed, or it ended long enough ago that slurmctld forgot it (after MinJobAge); a job that finished needs no waiting for, so remove it from `after`, or give a job that is queued or running".to_owned()
            ])
        );
        assert_eq!(
            after(&["22", "99:any"], QUEUE),
            Ok(Some("afterok:22,afterany:99".into())),
            "an array by its id, another user's job"
        );
    }

    #[test]
    fn an_ended_job_is_waited_for_only_when_its_end_can_meet_the_dependency() {
        assert_eq!(
            after(&["21", "100:notok", "100:any"], QUEUE),
            Ok(Some("afterok:21,afternotok:100,afterany:100".into())),
            "21 completed, 100 failed"
        );
        assert_eq!(
            after(&["100", "21:notok"], QUEUE),
            Err(vec![
                "--after 100: job 100 has ended (FAILED), so a dependency that waits for it to succeed can never be met and SLURM would hold this job for ever; use `100:any`, or remove it from `after`".to_owned(),
                "--after 21:notok: job 21 has ended (COMPLETED), so a dependency that waits for it to fail can never be met and SLURM would hold this job for ever; use `21:any`, or remove it from `after`".to_owned(),
            ])
        );
    }
}
