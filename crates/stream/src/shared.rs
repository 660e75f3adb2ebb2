//! What a stream index shares with its flusher thread: the view readers
//! see (segments, tiers, the frozen and active buffers), the state a flush
//! or a compaction changes, and the store's files.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, RwLock};

use spillway_core::sync;
use spillway_core::{Fs, Poison, Result};

use crate::buffer::Buffer;
use crate::cache::Cache;
use crate::manifest::Manifest;
use crate::options::Options;
use crate::records::{Bounds, Records, Shadow};
use crate::segment::{self, Segment};
use crate::stats::Counters;
use crate::template::OverflowStats;
use crate::tier::{self, Tier, Tiered, Tiering};
use crate::wal;

/// What readers see: the segments, oldest writes first, the tiers that
/// queries read in place of some of them, the buffer being flushed (if
/// any), and the active buffer.
#[derive(Debug, Clone)]
pub(crate) struct View {
    pub(crate) segments: Vec<Arc<Segment>>,
    /// In the order of the segments they cover, disjoint.
    pub(crate) tiers: Vec<Arc<Tier>>,
    pub(crate) frozen: Option<Arc<Buffer>>,
    pub(crate) active: Arc<Buffer>,
}

impl Tiered for RwLock<View> {
    fn current(&self) -> (Vec<Arc<Segment>>, Vec<Arc<Tier>>) {
        let view = sync::read(self);
        (view.segments.clone(), view.tiers.clone())
    }

    fn install(&self, tier: Option<Arc<Tier>>, replaced: &[Arc<Tier>]) -> bool {
        let mut view = sync::write(self);
        let position = |segments: &[Arc<Segment>], first: &Arc<Segment>| {
            segments.iter().position(|segment| Arc::ptr_eq(segment, first))
        };
        let still_there = replaced
            .iter()
            .all(|old| view.tiers.iter().any(|tier| Arc::ptr_eq(old, tier)));
        // Where the new tier's segments start, if they are still adjacent.
        let at = match &tier {
            Some(tier) => {
                position(&view.segments, &tier.covers[0]).filter(|&at| tier.starts(&view.segments[at..]))
            }
            None => Some(0),
        };
        let (true, Some(at)) = (still_there, at) else {
            return false;
        };
        view.tiers
            .retain(|old| !replaced.iter().any(|gone| Arc::ptr_eq(old, gone)));
        if let Some(tier) = tier {
            // Keep the tiers in the order of their segments.
            let before = view.tiers.partition_point(|old| {
                position(&view.segments, &old.covers[0]).is_some_and(|first| first < at)
            });
            view.tiers.insert(before, tier);
        }
        true
    }
}

impl View {
    /// What queries read in place of the segments: a tier for the
    /// segments it covers.
    pub(crate) fn sources(&self) -> Vec<&Arc<Segment>> {
        tier::sources(&self.segments, &self.tiers)
            .into_iter()
            .map(tier::Source::segment)
            .collect()
    }

    /// Fails if a damaged segment (a read-only store's) could change the
    /// answer of a query within `bounds`.
    pub(crate) fn check_damage(&self, bounds: &Bounds) -> Result<()> {
        self.segments
            .iter()
            .try_for_each(|segment| segment.check_damage(bounds))
    }

    /// The buffers, older first.
    pub(crate) fn buffers(&self) -> impl Iterator<Item = &Arc<Buffer>> {
        self.frozen.iter().chain(std::iter::once(&self.active))
    }
}

/// State changed only by a flush or a compaction (under this lock).
#[derive(Debug)]
pub(crate) struct Durable {
    /// As on disk.
    pub(crate) manifest: Manifest,
    pub(crate) last_overflow: OverflowStats,
    pub(crate) total_overflow: OverflowStats,
    /// Set when the store closes: the flusher thread writes the frozen
    /// buffer it may hold, then ends.
    pub(crate) stop: bool,
}

/// What the store shares with its flusher thread.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) fs: Arc<dyn Fs>,
    pub(crate) dir: PathBuf,
    pub(crate) options: Options,
    pub(crate) cache: Arc<Cache>,
    pub(crate) view: Arc<RwLock<View>>,
    pub(crate) durable: Mutex<Durable>,
    /// Signalled, under `durable`, when a buffer is frozen (for the
    /// flusher), when its segment is written or failed (for writers
    /// waiting to freeze the next), and when the store closes.
    pub(crate) frozen_changed: Condvar,
    pub(crate) poison: Poison,
    pub(crate) counters: Counters,
    /// The thread that merges resident segments into tiers (unset when
    /// read-only, without a cache, or with `tiers` off); dropping it stops
    /// the thread.
    pub(crate) tiering: OnceLock<Tiering>,
    /// Listed segments a read-only open could not open.
    pub(crate) damaged_segments: u64,
    /// The next log, made ready by the flusher (padded logs only); held
    /// while it is being made.
    pub(crate) spare: Mutex<Option<wal::Spare>>,
    /// Set when making a spare failed: freezes make their logs
    /// themselves from then on.
    pub(crate) spare_failed: std::sync::atomic::AtomicBool,
}

impl Shared {
    /// Waits until no buffer is frozen (its segment is written); fails if
    /// the store is poisoned.
    pub(crate) fn until_written<'a>(
        &self,
        mut durable: MutexGuard<'a, Durable>,
    ) -> Result<MutexGuard<'a, Durable>> {
        while sync::read(&self.view).frozen.is_some() {
            self.poison.check()?;
            durable = sync::wait(&self.frozen_changed, durable);
        }
        self.poison.check()?;
        Ok(durable)
    }

    pub(crate) fn write_segment(
        &self,
        id: u64,
        store_id: u64,
        seqs: (u64, u64),
        records: &Records,
        shadows: &[Shadow],
    ) -> Result<Arc<Segment>> {
        write_segment(
            self.fs.as_ref(),
            &self.dir,
            &self.cache,
            self.options.leaf_capacity,
            (id, store_id),
            seqs,
            records,
            shadows,
        )
    }
}

/// Writes segment `id` of store `store_id` (the pair given as `ids`) in
/// `dir`, syncs it and the directory, and opens it.
#[allow(clippy::too_many_arguments)] // a segment's footer fields, each its own
pub(crate) fn write_segment(
    fs: &dyn Fs,
    dir: &Path,
    cache: &Arc<Cache>,
    leaf_capacity: usize,
    ids: (u64, u64),
    seqs: (u64, u64),
    records: &Records,
    shadows: &[Shadow],
) -> Result<Arc<Segment>> {
    let (id, store_id) = ids;
    let path = dir.join(segment::file_name(id));
    segment::write(fs, &path, id, store_id, seqs, records, shadows, leaf_capacity)?;
    fs.sync_dir(dir)?;
    Segment::open(fs, &path, cache.clone())
}
