//! The layers a plan is resolved from, in precedence order (flags, job file, cluster
//! profile), and what resolving them finds: each key's value and source, or the problems.

use std::collections::BTreeMap;

use crate::job::{select_profile, JobFile, Profile};
use crate::keys::{JobKeys, Key, Source};
use crate::plan::Problem;
use crate::values::ValueError;

/// The layers in precedence order: flags, job file, profile.
pub(crate) struct Layers<'a> {
    list: Vec<(&'a JobKeys, Source)>,
    pub(crate) problems: Vec<Problem>,
    pub(crate) sources: BTreeMap<Key, Vec<Source>>,
}

impl<'a> Layers<'a> {
    /// `flags`, then the `job` file, then the first of `profiles` whose `match` fits
    /// `host`; and that profile.
    pub(crate) fn new(
        job: Option<&'a JobFile>,
        flags: &'a JobKeys,
        profiles: &'a [Profile],
        host: &str,
    ) -> (Layers<'a>, Option<&'a Profile>) {
        let profile = select_profile(profiles, host);
        let mut list: Vec<(&JobKeys, Source)> = vec![(flags, Source::Flag)];
        if let Some(job) = job {
            list.push((
                &job.keys,
                Source::File {
                    path: job.path.clone(),
                },
            ));
        }
        if let Some(p) = profile {
            list.push((
                &p.keys,
                Source::Profile {
                    path: p.path.clone(),
                },
            ));
        }
        let layers = Layers {
            list,
            problems: Vec::new(),
            sources: BTreeMap::new(),
        };
        (layers, profile)
    }

    /// The highest layer's raw value for `key`.
    pub(crate) fn first<T: ?Sized + 'a>(
        &self,
        get: impl Fn(&'a JobKeys) -> Option<&'a T>,
    ) -> Option<(&'a T, Source)> {
        self.list
            .iter()
            .find_map(|(keys, src)| get(keys).map(|v| (v, src.clone())))
    }

    /// The highest layer's value for `key`, parsed; a parse failure is a problem.
    pub(crate) fn take<R: ?Sized + 'a, T>(
        &mut self,
        key: Key,
        get: impl Fn(&'a JobKeys) -> Option<&'a R>,
        parse: impl Fn(&R) -> Result<T, ValueError>,
    ) -> Option<T> {
        let (raw, src) = self.first(get)?;
        match parse(raw) {
            Ok(v) => {
                self.sources.insert(key, vec![src]);
                Some(v)
            }
            Err(e) => {
                self.problem(key, Some(src), e.message);
                None
            }
        }
    }

    /// [`Layers::take`], or `default` (with herd's default as the source) when no layer
    /// sets the key; a value that does not parse is a problem, and `default` stands in.
    pub(crate) fn take_or<R: ?Sized + 'a, T>(
        &mut self,
        key: Key,
        get: impl Fn(&'a JobKeys) -> Option<&'a R> + Copy,
        parse: impl Fn(&R) -> Result<T, ValueError>,
        default: T,
    ) -> T {
        match self.take(key, get, parse) {
            Some(v) => v,
            None => {
                if self.first(get).is_none() {
                    self.set_source(key, Source::Default);
                }
                default
            }
        }
    }

    /// Where `key`'s value came from so far (the highest layer of a list).
    pub(crate) fn origin(&self, key: Key) -> Option<Source> {
        self.sources.get(&key).and_then(|s| s.last()).cloned()
    }

    /// Every layer's keys and source, highest first (flags, job file, profile): for keys
    /// that decide together (`cpus_per_worker` and `cpus_per_task`).
    pub(crate) fn top_down(&self) -> Vec<(&'a JobKeys, Source)> {
        self.list.iter().map(|(k, s)| (*k, s.clone())).collect()
    }

    /// Every layer's keys and source, lowest first (profile, job file, flags): how lists
    /// add up.
    pub(crate) fn bottom_up(&self) -> Vec<(JobKeys, Source)> {
        self.list
            .iter()
            .rev()
            .map(|(k, s)| ((*k).clone(), s.clone()))
            .collect()
    }

    /// Each key's sources, or every problem found, in key order.
    pub(crate) fn finish(self) -> Result<BTreeMap<Key, Vec<Source>>, crate::plan::ResolveError> {
        if self.problems.is_empty() {
            return Ok(self.sources);
        }
        let mut problems = self.problems;
        problems.sort_by_key(|p| p.key);
        Err(crate::plan::ResolveError { problems })
    }

    pub(crate) fn problem(&mut self, key: Key, origin: Option<Source>, message: impl Into<String>) {
        self.problems.push(Problem {
            key,
            origin,
            message: message.into(),
        });
    }

    pub(crate) fn set_source(&mut self, key: Key, src: Source) {
        self.sources.insert(key, vec![src]);
    }
}
