//! The GPUs of the attempt shown (docs/top.md, "GPUs"): each node's `node-N.gpus.jsonl`
//! read as it grows ([`gpus::Tail`]: a refresh parses only the lines appended since the
//! last one), the newest sample of each GPU kept, and the GPUs judged together on those
//! newest samples ([`gpus::flags_now`]).

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;

use herd_exp::gpus::{self, Flag, Sample};
use herd_exp::layout::AttemptDir;

/// One GPU as its newest sample shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpu {
    /// Its node's index in the attempt (N of `node-N.gpus.jsonl`).
    pub node: u32,
    /// Its node's host, when the attempt's `rendezvous` names it.
    pub host: Option<String>,
    /// Its newest sample.
    pub sample: Sample,
    /// What stands out about it, judged with every GPU of the job on their newest samples.
    pub flags: Vec<Flag>,
}

impl Gpu {
    /// `gpu-a02 GPU 7`, or `node 1 GPU 7` when the host is not known.
    pub fn name(&self) -> String {
        match &self.host {
            Some(h) => format!("{h} GPU {}", self.sample.gpu),
            None => format!("node {} GPU {}", self.node, self.sample.gpu),
        }
    }

    /// Its flags' words (`THROTTLED`, `IDLE MEM`), `None` when nothing stands out.
    pub fn flag_words(&self) -> Option<String> {
        let mut words: Vec<&str> = Vec::new();
        for f in &self.flags {
            if !words.contains(&f.word()) {
                words.push(f.word());
            }
        }
        (!words.is_empty()).then(|| words.join(" "))
    }

    /// The table's cell: its flags' words when it is flagged, else [`figures`].
    pub fn cell(&self) -> String {
        self.flag_words().unwrap_or_else(|| figures(&self.sample))
    }

    /// Whether it is flagged (its cell is highlighted as a warning).
    pub fn flagged(&self) -> bool {
        !self.flags.is_empty()
    }

    /// Who it serves: `rank 3`, `ranks 3, 4`, or its [`Gpu::name`] when no rank claims it.
    pub fn who(&self) -> String {
        match self.sample.ranks.as_slice() {
            [] => self.name(),
            [r] => format!("rank {r}"),
            many => {
                let list: Vec<String> = many.iter().map(u32::to_string).collect();
                format!("ranks {}", list.join(", "))
            }
        }
    }
}

/// A sample's utilisation, memory used (GiB) and power: `97% 59.8G 698W`; `-` for a figure
/// the GPU does not report.
pub fn figures(s: &Sample) -> String {
    let util = s
        .util
        .map_or_else(|| "-".to_owned(), |u| format!("{u:.0}%"));
    let mem = s
        .mem_used
        .map_or_else(|| "-".to_owned(), |m| format!("{:.1}G", m / 1024.0));
    let power = s
        .power
        .map_or_else(|| "-".to_owned(), |p| format!("{p:.0}W"));
    format!("{util} {mem} {power}")
}

/// The samples files of one attempt, read refresh after refresh.
#[derive(Debug, Default)]
pub struct Files {
    tails: BTreeMap<u32, gpus::Tail>,
    /// The newest sample of each (node, GPU).
    newest: BTreeMap<(u32, u32), Sample>,
    /// Why a file did not read at the last refresh.
    error: Option<String>,
}

impl Files {
    /// Reads what each node's samples file gained since the last refresh (a node whose
    /// file appeared since is read from its start); a GPU's newer sample replaces its
    /// older one.
    pub fn refresh(&mut self, dir: &AttemptDir) {
        self.error = None;
        for node in dir.gpu_nodes().unwrap_or_default() {
            let tail = self
                .tails
                .entry(node)
                .or_insert_with(|| gpus::Tail::new(dir.gpus(node)));
            let mut new = Vec::new();
            if let Err(e) = tail.read(&mut new) {
                self.error = Some(format!("cannot read {}: {e}", dir.gpus(node).display()));
            }
            for s in new {
                match self.newest.entry((node, s.gpu)) {
                    Entry::Vacant(v) => {
                        v.insert(s);
                    }
                    Entry::Occupied(mut o) => {
                        if s.t >= o.get().t {
                            o.insert(s);
                        }
                    }
                }
            }
        }
    }

    /// Why a samples file did not read at the last refresh.
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Every GPU with a sample, by node and index, flagged together; `hosts`: each node's
    /// host by its index.
    pub fn gpus(&self, hosts: &BTreeMap<u32, String>) -> Vec<Gpu> {
        let latest: Vec<&Sample> = self.newest.values().collect();
        let flags = gpus::flags_now(&latest);
        self.newest
            .iter()
            .zip(flags)
            .map(|(((node, _), s), flags)| Gpu {
                node: *node,
                host: hosts.get(node).cloned(),
                sample: s.clone(),
                flags,
            })
            .collect()
    }
}
