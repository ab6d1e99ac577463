//! The messages between agents after the rendezvous handshake ([`Msg`]); how they travel
//! is `protocol`'s.

use serde::{Deserialize, Serialize};

use herd_exp::failure::FailureReport;

/// Messages between agents after the handshake.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum Msg {
    /// Leader → followers: start attempt `attempt` with this master and layout.
    Start {
        attempt: u32,
        master_addr: String,
        master_port: u16,
        tasks_per_node: Vec<u32>,
        /// Restarts inside this allocation before this attempt (`TORCHELASTIC_RESTART_COUNT`).
        #[serde(default)]
        restarts: u32,
        /// `HERD_RESUME_FROM` for every worker of this attempt, decided once by the leader.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resume_from: Option<String>,
        /// The node ranks that run workers in this attempt, in the order their workers are
        /// ranked (a spare in a replaced node's place); `tasks_per_node` is theirs. Empty:
        /// every node, in node-rank order. A node not named stands by.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        nodes: Vec<u32>,
        /// Check the node first (`preflight`), answer `Preflight`, and start the workers
        /// only at `Go`.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        preflight: bool,
    },
    /// Follower → leader: this node's preflight for `attempt`: `failed` names the check and
    /// what is wrong, `None` when it passed.
    Preflight {
        attempt: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failed: Option<(String, String)>,
    },
    /// Leader → followers: every node passed its preflight; start attempt `attempt`'s
    /// workers.
    Go { attempt: u32 },
    /// A follower's worker failed (the follower has already torn its node down).
    Failed { report: Box<FailureReport> },
    /// All of a follower's workers exited 0.
    NodeDone { attempt: u32 },
    /// Leader → followers: end your workers now, with `signal` instead of SIGTERM when the
    /// job was cancelled by one (SIGTERM, SIGINT, SIGHUP), as the leader ends its own: every
    /// worker of the job sees the signal that cancelled it.
    Teardown {
        attempt: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<String>,
    },
    /// Follower → leader: my workers are gone; `step`: the highest training step they
    /// printed in this attempt (their metrics lines), for the rule that stops restarts
    /// that make no progress.
    TornDown {
        attempt: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step: Option<u64>,
    },
    /// Leader → followers: the job is over.
    Finish { ok: bool },
    /// Leader → one follower: a spare takes this node's place (it was lost, froze or was
    /// blamed); its workers go and its agent ends, leaving the job to the others.
    Dismiss { why: String },
    /// Leader → followers: ask every worker of attempt `attempt` to checkpoint and stop,
    /// with `signal` (`SIGUSR1`); from now on their exits, whatever the status, are the
    /// stop, not a failure.
    Stop { attempt: u32, signal: String },
    /// Follower → leader: this agent received `signal` (SIGTERM, SIGINT or SIGHUP); the
    /// leader decides what it means for the job (a cancel, a preemption, the time limit).
    Signalled { signal: String },
    /// Follower → leader, every second while the hang watchdog is on: how long each of
    /// its ranks has made no progress.
    Progress {
        attempt: u32,
        ranks: Vec<RankProgress>,
    },
    /// Leader → followers: collect every rank's Python stack (the job hangs).
    Dump { attempt: u32 },
    /// Follower → leader: its ranks' stacks.
    Stacks {
        attempt: u32,
        stacks: Vec<RankStack>,
    },
    /// Follower → leader: one of its GPUs raised an error during `attempt`.
    GpuError {
        attempt: u32,
        error: herd_exp::gpus::GpuError,
    },
    /// Either way, so silence means a lost peer.
    Heartbeat,
}

/// How long one rank has made no progress (no output line, no heartbeat), and the pace of
/// its progress so far in this attempt (`--hang-timeout auto`'s measure; an agent that does
/// not send it is taken for a rank still warming up).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RankProgress {
    /// Global rank.
    pub rank: u32,
    /// Its pid on its node.
    pub pid: i32,
    /// Milliseconds since its last progress, on its node's clock.
    pub silent_ms: u64,
    /// Whether it has made progress since it started (a line, a heartbeat): until then its
    /// silence is its start, measured against the start timeout.
    #[serde(default)]
    pub started: bool,
    /// The longest gap between two of its progress events so far, in milliseconds.
    #[serde(default)]
    pub longest_gap_ms: u64,
    /// How many gaps between its progress events were seen.
    #[serde(default)]
    pub gaps: u32,
    /// Milliseconds from its first progress to its last.
    #[serde(default)]
    pub progress_ms: u64,
}

pub use herd_exp::failure::RankStack;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_tagged_json_objects() {
        let start = Msg::Start {
            attempt: 1,
            master_addr: "10.0.0.1".into(),
            master_port: 29500,
            tasks_per_node: vec![2, 2],
            restarts: 1,
            resume_from: None,
            nodes: Vec::new(),
            preflight: false,
        };
        assert_eq!(
            serde_json::to_string(&start).expect("encodes"),
            r#"{"type":"start","attempt":1,"master_addr":"10.0.0.1","master_port":29500,"tasks_per_node":[2,2],"restarts":1}"#
        );
        let torn_down = |step| Msg::TornDown { attempt: 3, step };
        assert_eq!(
            serde_json::to_string(&torn_down(None)).expect("encodes"),
            r#"{"type":"torn_down","attempt":3}"#
        );
        assert_eq!(
            serde_json::to_string(&torn_down(Some(120))).expect("encodes"),
            r#"{"type":"torn_down","attempt":3,"step":120}"#
        );
        assert_eq!(
            serde_json::to_string(&Msg::Heartbeat).expect("encodes"),
            r#"{"type":"heartbeat"}"#
        );
        let back: Msg = serde_json::from_str(r#"{"type":"finish","ok":false}"#).expect("decodes");
        assert!(matches!(back, Msg::Finish { ok: false }));
        assert!(serde_json::from_str::<Msg>(r#"{"type":"launch_missiles"}"#).is_err());
    }

    /// An agent of the last version and this one understand each other: what one does not
    /// send the other takes as its default, what it does not know it passes over.
    #[test]
    fn older_agents_progress_and_teardown_read_with_defaults() {
        let old = r#"{"type":"progress","attempt":2,"ranks":[{"rank":1,"pid":7,"silent_ms":1500,"started":true}]}"#;
        let Ok(Msg::Progress { ranks, .. }) = serde_json::from_str::<Msg>(old) else {
            panic!("an older agent's progress reads");
        };
        assert_eq!(
            (ranks[0].longest_gap_ms, ranks[0].gaps, ranks[0].progress_ms),
            (0, 0, 0)
        );
        let back: Msg = serde_json::from_str(r#"{"type":"torn_down","attempt":2}"#).expect("reads");
        assert!(matches!(
            back,
            Msg::TornDown {
                attempt: 2,
                step: None
            }
        ));
        // This agent's messages, read by one that knows none of the new fields.
        #[derive(Deserialize)]
        struct OldRank {
            rank: u32,
            silent_ms: u64,
        }
        let new = RankProgress {
            rank: 1,
            pid: 7,
            silent_ms: 1500,
            started: true,
            longest_gap_ms: 2500,
            gaps: 4,
            progress_ms: 9000,
        };
        let text = serde_json::to_string(&new).expect("encodes");
        let old: OldRank = serde_json::from_str(&text).expect("an older agent reads it");
        assert_eq!((old.rank, old.silent_ms), (1, 1500));
    }
}
