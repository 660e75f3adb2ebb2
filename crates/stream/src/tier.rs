//! Tiers: adjacent segments whose records are in memory, merged in the
//! background into one sorted run that queries read in their place.
//!
//! Every flushed buffer is a segment, so after N buffers a range query
//! merges N + 1 sources whose keys interleave finely, and the merge costs
//! more per record than the copy. The tiering thread merges the newest
//! adjacent pair of resident sources whenever the older holds at most
//! [`RATIO`] times the records of the newer: a binary counter over the
//! buffers, so every record is merged about log2(N) times and a query
//! reads about log2(N) sources, the largest nearly all of the data. A
//! merged run is *resolved* (records that a newer update or delete of the
//! tier replaced are dropped) and summarized in leaves, so range queries
//! and range aggregates read a tier as they read a segment.
//!
//! Tiers live only in memory: the files, the manifest and recovery are
//! untouched, and a reopened store starts without them. A tier's records
//! count against the segment cache's budget in place of its segments',
//! whose decoded copies it releases; over the budget, the oldest tier is
//! dropped (its segments are read back from their files on demand).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use spillway_core::sync;
use spillway_core::{Error, Result};

use crate::cache::Cache;
use crate::merge::{self, Rows, Run};
use crate::records::{drop_shadowed, newest_shadows, Records};
use crate::segment::{self, Segment};

/// How much larger than the newer of two adjacent sources the older may
/// be for them to merge: about 1 makes a binary counter; a little more
/// lets buffers flushed at slightly different sizes pair up.
pub(crate) const RATIO: f64 = 1.5;

/// Adjacent segments merged in memory.
#[derive(Debug)]
pub(crate) struct Tier {
    /// The segments it stands for, oldest first, adjacent in the view.
    pub covers: Vec<Arc<Segment>>,
    /// Their records merged and resolved, as a segment held in memory.
    pub segment: Arc<Segment>,
    cache: Arc<Cache>,
    bytes: usize,
}

impl Drop for Tier {
    fn drop(&mut self) {
        self.cache.unpin(self.bytes);
    }
}

impl Tier {
    /// Whether it stands for the segments that `segments` starts with.
    pub fn starts(&self, segments: &[Arc<Segment>]) -> bool {
        self.covers.len() <= segments.len()
            && self
                .covers
                .iter()
                .zip(segments)
                .all(|(covered, segment)| Arc::ptr_eq(covered, segment))
    }

    /// Whether it stands for any of `segments`.
    pub fn covers_any(&self, segments: &[Arc<Segment>]) -> bool {
        self.covers
            .iter()
            .any(|covered| segments.iter().any(|segment| Arc::ptr_eq(covered, segment)))
    }
}

/// What queries read: each segment, or the tier standing for it and the
/// segments after it. `tiers` are in the order of the segments they
/// cover; one whose segments are no longer adjacent in `segments` is
/// passed over.
pub(crate) fn sources<'a>(segments: &'a [Arc<Segment>], tiers: &'a [Arc<Tier>]) -> Vec<Source<'a>> {
    let mut sources = Vec::with_capacity(segments.len());
    let mut at = 0;
    while at < segments.len() {
        match tiers.iter().find(|tier| tier.starts(&segments[at..])) {
            Some(tier) => {
                sources.push(Source::Tier(tier));
                at += tier.covers.len();
            }
            None => {
                sources.push(Source::Segment(&segments[at]));
                at += 1;
            }
        }
    }
    sources
}

/// One source of a query.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Source<'a> {
    Segment(&'a Arc<Segment>),
    Tier(&'a Arc<Tier>),
}

impl<'a> Source<'a> {
    /// The segment (a tier's in-memory one) that queries read.
    pub fn segment(self) -> &'a Arc<Segment> {
        match self {
            Source::Segment(segment) => segment,
            Source::Tier(tier) => &tier.segment,
        }
    }

    fn covers(self) -> &'a [Arc<Segment>] {
        match self {
            Source::Segment(segment) => std::slice::from_ref(segment),
            Source::Tier(tier) => &tier.covers,
        }
    }
}

/// The segments and tiers that the tiering thread reads and changes: the
/// store's view, through these two callbacks.
pub(crate) trait Tiered: Send + Sync + 'static {
    /// The segments (oldest first) and tiers now.
    fn current(&self) -> (Vec<Arc<Segment>>, Vec<Arc<Tier>>);
    /// Installs `tier` in place of `replaced` (tiers it merged) if its
    /// segments are still adjacent in the view and `replaced` still
    /// there; or, with no tier, drops `replaced`. Returns whether it did.
    fn install(&self, tier: Option<Arc<Tier>>, replaced: &[Arc<Tier>]) -> bool;
}

/// Counters of the tiering thread.
#[derive(Debug, Default)]
pub(crate) struct TierCounters {
    /// Merges made (and installed).
    pub merges: AtomicU64,
    /// Records written by those merges.
    pub records: AtomicU64,
}

#[derive(Debug, Default)]
struct State {
    /// A flush since the thread last looked.
    pending: bool,
    /// The thread is merging.
    busy: bool,
    stop: bool,
}

#[derive(Debug, Default)]
struct Signal {
    state: Mutex<State>,
    changed: Condvar,
}

impl Signal {
    fn lock(&self) -> MutexGuard<'_, State> {
        sync::lock(&self.state)
    }

    fn wait<'a>(&self, guard: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        sync::wait(&self.changed, guard)
    }
}

/// The background thread that merges tiers, woken after each flush.
#[derive(Debug)]
pub(crate) struct Tiering {
    signal: Arc<Signal>,
    pub counters: Arc<TierCounters>,
    thread: Option<JoinHandle<()>>,
}

impl Tiering {
    /// Starts the thread over `view`, cutting tiers' leaves every
    /// `leaf_records` records.
    pub fn start(view: Arc<dyn Tiered>, cache: Arc<Cache>, leaf_records: usize) -> Result<Tiering> {
        let signal = Arc::new(Signal::default());
        let counters = Arc::new(TierCounters::default());
        let thread = {
            let (signal, counters) = (signal.clone(), counters.clone());
            std::thread::Builder::new()
                .name("spillway-tiers".into())
                .spawn(move || run(&*view, &cache, leaf_records, &signal, &counters))
                .map_err(|error| Error::io("starting the tiering thread", error))?
        };
        Ok(Tiering {
            signal,
            counters,
            thread: Some(thread),
        })
    }

    /// Asks the thread to look for merges (a segment was added).
    pub fn wake(&self) {
        self.signal.lock().pending = true;
        self.signal.changed.notify_all();
    }

    /// Waits until the thread has made every merge there is to make.
    pub fn settle(&self) {
        let mut state = self.signal.lock();
        while state.pending || state.busy {
            state = self.signal.wait(state);
        }
    }
}

impl Drop for Tiering {
    fn drop(&mut self) {
        self.signal.lock().stop = true;
        self.signal.changed.notify_all();
        if let Some(thread) = self.thread.take() {
            // A panic in the thread lost only tiers, which the store can
            // do without: nothing to report.
            let _ = thread.join();
        }
    }
}

fn run(view: &dyn Tiered, cache: &Arc<Cache>, leaf_records: usize, signal: &Signal, counters: &TierCounters) {
    loop {
        {
            let mut state = signal.lock();
            state.busy = false;
            signal.changed.notify_all();
            while !state.pending && !state.stop {
                state = signal.wait(state);
            }
            if state.stop {
                return;
            }
            state.pending = false;
            state.busy = true;
        }
        while step(view, cache, leaf_records, counters) {}
    }
}

/// Makes one change: drops the oldest tier if the cache is over its
/// budget, or merges the newest pair of resident sources that qualifies.
/// Returns whether there may be more to do.
fn step(view: &dyn Tiered, cache: &Arc<Cache>, leaf_records: usize, counters: &TierCounters) -> bool {
    let (segments, tiers) = view.current();
    if cache.used() > cache.budget() {
        return match tiers.first() {
            Some(oldest) => view.install(None, std::slice::from_ref(oldest)),
            None => false,
        };
    }
    let sources = sources(&segments, &tiers);
    let pair = (1..sources.len()).rev().find_map(|at| {
        let (older, newer) = (sources[at - 1], sources[at]);
        let (older_records, newer_records) = (older.segment().resident()?, newer.segment().resident()?);
        (older_records.len() as f64 <= RATIO * newer_records.len() as f64)
            .then_some([(older, older_records), (newer, newer_records)])
    });
    let Some(pair) = pair else {
        return false;
    };
    let replaced: Vec<Arc<Tier>> = pair
        .iter()
        .filter_map(|(source, _)| match source {
            Source::Tier(tier) => Some(Arc::clone(tier)),
            Source::Segment(_) => None,
        })
        .collect();
    let tier = merged(pair, cache, leaf_records);
    let records = tier.segment.meta.records;
    let covers = tier.covers.clone();
    if !view.install(Some(tier), &replaced) {
        // A compaction changed the segments meanwhile: look again.
        return true;
    }
    for segment in &covers {
        segment.release();
    }
    counters.merges.fetch_add(1, Ordering::Relaxed);
    counters.records.fetch_add(records, Ordering::Relaxed);
    true
}

/// The tier of two adjacent sources and their records.
fn merged(pair: [(Source<'_>, Arc<Records>); 2], cache: &Arc<Cache>, leaf_records: usize) -> Arc<Tier> {
    let [(older, older_records), (newer, newer_records)] = pair;
    let runs = [
        Run {
            rows: Rows::Span(0..older_records.len()),
            records: older_records,
        },
        Run {
            rows: Rows::Span(0..newer_records.len()),
            records: newer_records,
        },
    ];
    let mut all = Records::default();
    merge::merge_one(&runs, &mut all);
    let mut shadows = [
        &older.segment().meta.shadows[..],
        &newer.segment().meta.shadows[..],
    ]
    .concat();
    shadows.sort_unstable();
    let all = drop_shadowed(all, &shadows);
    newest_shadows(&mut shadows);
    let covers: Vec<Arc<Segment>> = [older.covers(), newer.covers()].concat();
    let seqs = (older.segment().meta.first_seq, newer.segment().meta.last_seq);
    let meta = segment::meta_in_memory(seqs, &all, shadows, leaf_records);
    let label = PathBuf::from(format!(
        "<tier of segments {}..={}>",
        covers[0].meta.id,
        covers[covers.len() - 1].meta.id
    ));
    let bytes = all.heap_bytes();
    cache.pin(bytes);
    Arc::new(Tier {
        segment: Segment::in_memory(meta, Arc::new(all), label, cache.clone()),
        covers,
        cache: cache.clone(),
        bytes,
    })
}
