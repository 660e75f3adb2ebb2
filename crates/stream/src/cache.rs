//! The cache of decoded segments: what queries read from memory instead
//! of the segment files, up to a budget of bytes, the oldest loaded
//! dropped first. A tier's records are counted against the budget too
//! (pinned) while it holds them.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex, Weak};

use spillway_core::sync;

/// Something whose decoded records the cache counts: a segment.
pub(crate) trait Resident: Send + Sync + fmt::Debug {
    /// Drops the decoded records from memory (the cache evicted them).
    fn evict(&self);
}

/// Decoded segments kept in memory, up to a budget of bytes; the oldest
/// loaded is dropped first.
#[derive(Debug)]
pub struct Cache {
    budget: usize,
    state: Mutex<CacheState>,
}

#[derive(Debug, Default)]
struct CacheState {
    used: usize,
    loaded: VecDeque<(Weak<dyn Resident>, usize)>,
}

impl Cache {
    /// A cache of up to `budget` bytes (0: segments are read leaf by leaf
    /// on every query).
    pub fn new(budget: usize) -> Arc<Self> {
        Arc::new(Cache {
            budget,
            state: Mutex::default(),
        })
    }

    /// Counts the `bytes` of records `held` has just taken into memory,
    /// evicting the oldest loaded while the budget is exceeded (the newest
    /// always stays).
    pub(crate) fn admit(&self, held: Weak<dyn Resident>, bytes: usize) {
        let mut evicted = Vec::new();
        {
            let mut state = sync::lock(&self.state);
            state.purge();
            state.used += bytes;
            state.loaded.push_back((held, bytes));
            while state.used > self.budget && state.loaded.len() > 1 {
                let (victim, victim_bytes) = state.loaded.pop_front().expect("not empty");
                state.used -= victim_bytes;
                evicted.push(victim);
            }
        }
        for victim in evicted.iter().filter_map(Weak::upgrade) {
            victim.evict();
        }
    }

    /// Counts `bytes` held outside the cache's care (a tier's records)
    /// against its budget until [`Cache::unpin`]: the segments they came
    /// from are evicted for as long.
    pub(crate) fn pin(&self, bytes: usize) {
        sync::lock(&self.state).used += bytes;
    }

    /// Gives back what [`Cache::pin`] took.
    pub(crate) fn unpin(&self, bytes: usize) {
        sync::lock(&self.state).used -= bytes;
    }

    /// The budget in bytes.
    pub(crate) fn budget(&self) -> usize {
        self.budget
    }

    /// Stops counting `held`'s records (merged into a tier).
    pub(crate) fn forget(&self, held: &Weak<dyn Resident>) {
        let mut state = sync::lock(&self.state);
        state.drop_where(|loaded| loaded.ptr_eq(held));
    }

    /// Bytes of decoded segments held.
    pub fn used(&self) -> usize {
        let mut state = sync::lock(&self.state);
        state.purge();
        state.used
    }
}

impl CacheState {
    /// Forgets the segments dropped since (merged away by a compaction).
    fn purge(&mut self) {
        self.drop_where(|segment| segment.strong_count() == 0);
    }

    /// Forgets the loaded segments that `gone` picks, and their bytes.
    fn drop_where(&mut self, gone: impl Fn(&Weak<dyn Resident>) -> bool) {
        let mut freed = 0;
        self.loaded.retain(|(segment, bytes)| {
            let drop = gone(segment);
            if drop {
                freed += bytes;
            }
            !drop
        });
        self.used -= freed;
    }
}
