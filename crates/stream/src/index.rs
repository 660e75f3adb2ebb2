//! [`StreamIndex`]: the store. Writes go to the write-ahead log and the
//! active buffer, indexed by a template B+ tree; a full buffer becomes an
//! immutable segment file; queries read a consistent snapshot of the
//! segments and the buffer.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, RwLock};
use std::thread::JoinHandle;
use std::time::Instant;

use spillway_core::sync;
use spillway_core::{ensure, DirectoryLock, Error, ErrorKind, Fs, Interrupt, Poison, RealFs, Result};

use crate::batch::{Batch, Op};
use crate::bptree::BPlusTree;
use crate::manifest::{self, Listed, LiveLog, Manifest, NOT_CLOSED};
use crate::merge::{self, Rows, Run};
use crate::records::{drop_shadowed, newest_shadow, newest_shadows, Aggregate, Bounds, Records, Shadow};
use crate::repair::{self, RepairReport};
use crate::segment::{self, Cache, Segment, SegmentMeta};
use crate::survey::{self, Unaccounted};
use crate::template::{OverflowStats, TemplateTree};
use crate::tier::{self, Tier, TierCounters, Tiered, Tiering};
use crate::wal::{self, Wal, WalSync};

/// How each buffer is indexed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TemplatePolicy {
    /// No template: every buffer grows an ordinary B+ tree with splits
    /// (the seed's baseline, "rebuilt per buffer").
    None,
    /// The seed: the first buffer's grown tree becomes the template of
    /// every later buffer, never changed.
    Fixed,
    /// Beyond the seed: when a flushed buffer had more than `threshold`
    /// of its leaves overflowed, or of its entries in overflow nodes (keys
    /// drifting past the template's edge pile up in one leaf), the next
    /// buffer gets a template rebuilt from that buffer's keys
    /// (equal-count leaves at the target fill); within a buffer, the
    /// leaves on course to overflow are cut again. The first buffer starts
    /// from a template of one leaf, cut as soon as it holds enough keys,
    /// instead of growing a B+ tree.
    Rebuild {
        /// Share of overflowed leaves or overflow entries, in 0..=1, above
        /// which to rebuild.
        threshold: f64,
    },
}

/// What a [`StreamIndex`] is opened with.
#[derive(Debug, Clone)]
pub struct Options {
    /// Bytes of records (values plus a fixed cost per record) a buffer
    /// holds before it is flushed as a segment.
    pub buffer_bytes: usize,
    /// Entries per leaf, in the buffer's tree and in segments.
    pub leaf_capacity: usize,
    /// Children per internal node.
    pub fan_out: usize,
    /// How buffers are indexed.
    pub template: TemplatePolicy,
    /// Leaf fill a rebuilt template aims at, in (0, 1].
    pub fill: f64,
    /// The longest value accepted (capped at half of `buffer_bytes`).
    pub max_value_bytes: usize,
    /// Refuse writes whose time is before the latest time written.
    pub ordered_time: bool,
    /// Sync the log before a write returns (else a crash of the machine,
    /// not of the process, may lose acknowledged writes).
    pub sync: bool,
    /// Bytes of decoded segments kept in memory (0: read leaves from the
    /// file on every query).
    pub cache_bytes: usize,
    /// Merge adjacent segments held in the cache into tiers in the
    /// background, so that a range query merges a few sources rather than
    /// one per flushed buffer (see the crate's DESIGN.md).
    pub tiers: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            buffer_bytes: 64 << 20,
            leaf_capacity: 64,
            fan_out: 64,
            template: TemplatePolicy::Rebuild { threshold: 0.05 },
            fill: 0.7,
            max_value_bytes: 1 << 20,
            ordered_time: false,
            sync: true,
            cache_bytes: 1 << 30,
            tiers: true,
        }
    }
}

/// How often the flusher of a store without `sync` makes its active log
/// durable, and how much the log must have grown since (see
/// `Shared::sync_active_log`).
const LOG_SYNC_INTERVAL: std::time::Duration = std::time::Duration::from_millis(50);
const LOG_SYNC_BYTES_MIN: u64 = 1 << 20;

/// The bytes a record costs in a buffer beyond its value: its entry in
/// the tree (32 bytes, in leaves about 70% full), its op and value offset.
const RECORD_OVERHEAD_BYTES: usize = 56;

/// A buffer tree's entry: the record's key and time, where it is in the
/// buffer, its op, and its value itself when that is 8 bytes or shorter
/// (numbers, most often). Entries in key order point all over the
/// buffer's columns, so a query that had to read each record's op and
/// value there would miss the cache two or three times per record; with
/// them in the entry, it reads the leaves and nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct BufferEntry {
    key: u64,
    time: u64,
    /// The location (bits 8 and up; unique, so entries order by key,
    /// time and location), the op (bits 4-7) and the inline value's
    /// length (bits 0-3, [`NOT_INLINE`] for a longer value).
    tag: u64,
    value: [u8; 8],
}

/// The length a [`BufferEntry`] notes for a value kept in the columns.
const NOT_INLINE: u64 = 0xf;

impl BufferEntry {
    fn new(key: u64, time: u64, location: u64, op: Op, value: &[u8]) -> Self {
        debug_assert!(location < 1 << 56, "a buffer holds fewer records");
        let mut inline = [0; 8];
        let length = match inline.get_mut(..value.len()) {
            Some(prefix) => {
                prefix.copy_from_slice(value);
                value.len() as u64
            }
            None => NOT_INLINE,
        };
        BufferEntry {
            key,
            time,
            tag: location << 8 | (op as u64) << 4 | length,
            value: inline,
        }
    }

    fn location(&self) -> u64 {
        self.tag >> 8
    }

    fn op(&self) -> Op {
        Op::from_byte(((self.tag >> 4) & 0xf) as u8).expect("entries hold ops")
    }

    /// The length of the value, if it is held inline.
    fn inline_len(&self) -> Option<usize> {
        match self.tag & 0xf {
            NOT_INLINE => None,
            length => Some(length as usize),
        }
    }

    /// The value, if it is held inline.
    fn inline_value(&self) -> Option<&[u8]> {
        self.inline_len().map(|length| &self.value[..length])
    }
}

impl crate::entry::Indexed for BufferEntry {
    #[inline]
    fn key(&self) -> u64 {
        self.key
    }
}

impl Options {
    fn check(&self) -> Result<()> {
        ensure!(
            self.buffer_bytes >= 4096,
            InvalidArgument,
            "buffer_bytes must be at least 4096, got {}",
            self.buffer_bytes
        );
        ensure!(
            (2..=1 << 16).contains(&self.leaf_capacity),
            InvalidArgument,
            "leaf_capacity must be in 2..=65536, got {}",
            self.leaf_capacity
        );
        ensure!(
            (3..=1 << 16).contains(&self.fan_out),
            InvalidArgument,
            "fan_out must be in 3..=65536, got {}",
            self.fan_out
        );
        ensure!(
            self.fill > 0.0 && self.fill <= 1.0,
            InvalidArgument,
            "fill must be in (0, 1], got {}",
            self.fill
        );
        if let TemplatePolicy::Rebuild { threshold } = self.template {
            ensure!(
                (0.0..=1.0).contains(&threshold),
                InvalidArgument,
                "the template rebuild threshold must be in 0..=1, got {threshold}"
            );
        }
        Ok(())
    }

    /// The longest value accepted: `max_value_bytes`, but never more than
    /// half a buffer (so a buffer always holds two) nor what a log frame
    /// can say.
    pub fn value_limit(&self) -> usize {
        self.max_value_bytes
            .min(self.buffer_bytes / 2)
            .min(u32::MAX as usize)
    }
}

/// The index of a buffer.
#[derive(Debug)]
enum BufferTree {
    /// An ordinary B+ tree, grown under one lock.
    Growing(Mutex<BPlusTree<BufferEntry>>),
    /// A template, filled under per-leaf locks (the lock around it is
    /// taken shared by inserts and reads, and exclusively only to replace
    /// it by a rebuilt one).
    Template(RwLock<TemplateTree<BufferEntry>>),
}

impl BufferTree {
    fn insert_batch(&self, entries: &[BufferEntry]) {
        match self {
            BufferTree::Growing(tree) => {
                let mut tree = sync::lock(tree);
                entries.iter().for_each(|entry| tree.insert(*entry));
            }
            BufferTree::Template(tree) => sync::read(tree).insert_batch(entries),
        }
    }

    /// Appends to `out` the entries with keys from `low` to `high`.
    fn extend_range(&self, low: u64, high: u64, out: &mut Vec<BufferEntry>) {
        match self {
            BufferTree::Growing(tree) => sync::lock(tree).range(low, high, |entry| out.push(*entry)),
            BufferTree::Template(tree) => sync::read(tree).extend_range(low, high, out),
        }
    }

    /// Under the rebuild policy, replaces a template that keys have
    /// drifted away from by one made from the keys so far, sized for the
    /// `expected_entries` the buffer will hold; returns whether it did.
    fn rebuild_if_stretched(&self, options: &Options, expected_entries: usize) -> bool {
        let (BufferTree::Template(tree), TemplatePolicy::Rebuild { threshold }) = (self, options.template)
        else {
            return false;
        };
        TemplateTree::rebuild_if_stretched(tree, expected_entries, threshold, options.fan_out, options.fill)
    }
}

/// The records of a buffer, in arrival order, and its log.
#[derive(Debug)]
struct BufferData {
    /// `None` in a store opened read-only.
    wal: Option<Wal>,
    ops: Vec<Op>,
    value_ends: Vec<u64>,
    values: Vec<u8>,
    /// The batches being written (first sequence number, writes): a query
    /// skips them, so it sees each batch whole or not at all.
    in_flight: Vec<(u64, u64)>,
}

impl BufferData {
    fn len(&self) -> usize {
        self.ops.len()
    }

    fn bytes(&self) -> usize {
        self.values.len() + self.ops.len() * RECORD_OVERHEAD_BYTES
    }

    /// Appends the batch's ops and values (its entries go into the tree
    /// apart: [`Buffer::index`]).
    fn push_batch(&mut self, batch: &Batch) {
        self.ops.extend_from_slice(&batch.ops);
        let base = self.values.len() as u64;
        self.value_ends
            .extend(batch.value_ends.iter().map(|&end| base + end as u64));
        self.values.extend_from_slice(&batch.values);
    }

    /// What the buffer will hold when full, at the mean size so far.
    fn expected_entries(&self, options: &Options) -> usize {
        (self.len() as f64 * options.buffer_bytes as f64 / self.bytes() as f64) as usize
    }

    /// Appends the records of `entries` (this buffer's, the first at
    /// `first_seq`; no deletes) to `records`. Entries that all hold 8-byte
    /// values (numbers, most often) are copied column by column in one
    /// pass. A value not held in its entry is read from the columns, which
    /// misses the cache: done in chunks of two passes, which keep the
    /// misses independent of each other for the processor to overlap (the
    /// value bounds of a chunk, then its values).
    fn copy_records(&self, first_seq: u64, entries: &[BufferEntry], records: &mut Records) {
        debug_assert!(entries.iter().all(|entry| entry.op() != Op::Delete));
        if entries.iter().all(|entry| entry.inline_len() == Some(8)) {
            let mut out = records.push_fixed::<8>(entries.len());
            for ((key, time, seq, value), entry) in out.slots().zip(entries) {
                (*key, *time, *seq, *value) =
                    (entry.key, entry.time, first_seq + entry.location(), entry.value);
            }
            return;
        }
        const CHUNK: usize = 1024;
        records.reserve(entries.len(), entries.len() * size_of::<u64>());
        let mut bounds: Vec<Range<usize>> = Vec::new();
        for chunk in entries.chunks(CHUNK) {
            bounds.clear();
            bounds.extend(
                chunk
                    .iter()
                    .filter(|entry| entry.inline_value().is_none())
                    .map(|entry| self.value_range(entry.location() as usize)),
            );
            let mut held_apart = bounds.drain(..);
            for entry in chunk {
                let value = match entry.inline_value() {
                    Some(value) => value,
                    None => &self.values[held_apart.next().expect("bounds for every value held apart")],
                };
                records.push(entry.key, entry.time, first_seq + entry.location(), value);
            }
        }
    }

    fn value_range(&self, location: usize) -> Range<usize> {
        let start = if location == 0 {
            0
        } else {
            self.value_ends[location - 1] as usize
        };
        start..self.value_ends[location] as usize
    }
}

/// The active buffer: records from `first_seq` on, entry `location` being
/// write `first_seq + location`.
#[derive(Debug)]
struct Buffer {
    first_seq: u64,
    log_number: u64,
    tree: BufferTree,
    data: Mutex<BufferData>,
    wal_sync: Option<Arc<WalSync>>,
    /// How far the flusher has synced the log in the background (a store
    /// without `sync`).
    synced_in_background: AtomicU64,
}

impl Buffer {
    /// Indexes `batch`, whose writes are this buffer's from `location` on;
    /// returns whether the tree was rebuilt (see [`BufferTree`]).
    fn index(&self, batch: &Batch, location: u64, options: &Options, expected_entries: usize) -> bool {
        let entries: Vec<BufferEntry> = (0..batch.len())
            .map(|i| {
                BufferEntry::new(
                    batch.keys[i],
                    batch.times[i],
                    location + i as u64,
                    batch.ops[i],
                    batch.value(i),
                )
            })
            .collect();
        self.tree.insert_batch(&entries);
        self.tree.rebuild_if_stretched(options, expected_entries)
    }

    /// Adds `batch`, read back from a log (its writes numbered from
    /// `first_seq`, which must continue the buffer's), to a buffer that
    /// has no log. Returns whether the tree was rebuilt.
    fn insert_replayed(&self, batch: &Batch, first_seq: u64, options: &Options) -> Result<bool> {
        let mut data = sync::lock(&self.data);
        let location = data.len() as u64;
        if first_seq != self.first_seq + location {
            spillway_core::bail!(
                Internal,
                "replayed writes from seq {first_seq} into a buffer at seq {}",
                self.first_seq + location
            );
        }
        data.push_batch(batch);
        let expected_entries = data.expected_entries(options);
        drop(data);
        Ok(self.index(batch, location, options, expected_entries))
    }

    /// What a query starting now may see of this buffer.
    fn visible(&self) -> Visible {
        let data = sync::lock(&self.data);
        Visible {
            below: self.first_seq + data.len() as u64,
            in_flight: data.in_flight.clone(),
        }
    }

    /// The buffer's writes within `bounds` that `visible` lets a query
    /// see: its records into `records`, its updates' and deletes' shadows
    /// into `shadows`.
    fn collect(&self, bounds: &Bounds, visible: &Visible, records: &mut Records, shadows: &mut Vec<Shadow>) {
        let mut entries = Vec::new();
        self.tree
            .extend_range(bounds.key_low, bounds.key_high, &mut entries);
        entries.retain(|entry| {
            bounds.contains(entry.key, entry.time) && visible.sees(self.first_seq + entry.location())
        });
        // (key, time, location) order is (key, time, seq) order. A
        // template's range gives it; a grown tree keeps equal keys in
        // arrival order, not by time.
        if !entries.is_sorted() {
            entries.sort_unstable();
        }
        shadows.extend(
            entries
                .iter()
                .filter(|entry| entry.op().shadows())
                .map(|entry| Shadow {
                    key: entry.key,
                    time: entry.time,
                    seq: self.first_seq + entry.location(),
                }),
        );
        entries.retain(|entry| entry.op() != Op::Delete);
        sync::lock(&self.data).copy_records(self.first_seq, &entries, records);
    }
}

/// The writes of a buffer that a query may see: those written before it
/// started, less the batches still being written then.
#[derive(Debug)]
struct Visible {
    below: u64,
    in_flight: Vec<(u64, u64)>,
}

impl Visible {
    fn sees(&self, seq: u64) -> bool {
        seq < self.below
            && !self
                .in_flight
                .iter()
                .any(|&(first, writes)| (first..first + writes).contains(&seq))
    }
}

/// What readers see: the segments, oldest writes first, the tiers that
/// queries read in place of some of them, the buffer being flushed (if
/// any), and the active buffer.
#[derive(Debug, Clone)]
struct View {
    segments: Vec<Arc<Segment>>,
    /// In the order of the segments they cover, disjoint.
    tiers: Vec<Arc<Tier>>,
    frozen: Option<Arc<Buffer>>,
    active: Arc<Buffer>,
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
    fn sources(&self) -> Vec<&Arc<Segment>> {
        tier::sources(&self.segments, &self.tiers)
            .into_iter()
            .map(tier::Source::segment)
            .collect()
    }

    /// Fails if a damaged segment (a read-only store's) could change the
    /// answer of a query within `bounds`.
    fn check_damage(&self, bounds: &Bounds) -> Result<()> {
        self.segments
            .iter()
            .try_for_each(|segment| segment.check_damage(bounds))
    }

    /// The buffers, older first.
    fn buffers(&self) -> impl Iterator<Item = &Arc<Buffer>> {
        self.frozen.iter().chain(std::iter::once(&self.active))
    }
}

/// Counters of a [`StreamIndex`]; see [`StreamIndex::stats`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamStats {
    /// Writes accepted since the store was opened (appends, updates and
    /// deletes; replayed ones included).
    pub writes: u64,
    /// The next sequence number.
    pub next_seq: u64,
    /// Records in buffers, not yet in segments (writes, before
    /// newest-wins): the active buffer's, and a full one's whose segment
    /// is being written.
    pub buffer_records: u64,
    /// Bytes those buffers count against `buffer_bytes`.
    pub buffer_bytes: u64,
    /// Segments.
    pub segments: u64,
    /// Live records in segments.
    pub segment_records: u64,
    /// Bytes of segment files.
    pub segment_bytes: u64,
    /// Buffers flushed as segments.
    pub flushes: u64,
    /// Time writers were held up by flushes, in seconds: the next
    /// buffer's index made and the full one handed to the flusher thread,
    /// and any wait for the flusher to finish the buffer before (the
    /// stall when writes outrun segment writing).
    pub flush_pause_seconds: f64,
    /// Templates made: the first from a grown tree (`Fixed`), then
    /// rebuilds, within buffers too.
    pub templates: u64,
    /// Leaves of the active buffer's template (0 without one).
    pub template_leaves: u64,
    /// Overflow of the last buffer flushed.
    pub last_overflow: OverflowStats,
    /// Overflow summed over every buffer flushed through a template.
    pub total_overflow: OverflowStats,
    /// Compactions run, and segments they merged.
    pub compactions: u64,
    /// Segments merged by compactions.
    pub compacted_segments: u64,
    /// Tiers that queries read in place of the segments they cover.
    pub tiers: u64,
    /// Merges into tiers made (of two segments, or tiers, at a time).
    pub tier_merges: u64,
    /// Records those merges wrote.
    pub tier_records: u64,
    /// Bytes of decoded segments (and tiers) held in memory.
    pub cache_bytes: u64,
    /// Leaves whose summary answered an aggregate without reading them.
    pub leaves_summarized: u64,
    /// Leaves read by queries (or by aggregates that could not use the summary).
    pub leaves_read: u64,
    /// Files in the store's directory that are not part of it and that
    /// nothing proves obsolete, kept where they are (see
    /// [`StreamIndex::unaccounted`]).
    pub unaccounted_files: u64,
    /// Listed segments that could not be opened (a store opened
    /// read-only goes on without them; queries that need them fail).
    pub damaged_segments: u64,
}

/// What [`StreamIndex::verify`] checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Segment files checked.
    pub segments: u64,
    /// Live records in them.
    pub records: u64,
    /// Leaves whose checksums and summaries were checked.
    pub leaves: u64,
    /// Bytes of segment files read.
    pub bytes: u64,
    /// Live logs read (every frame checked, as a chain).
    pub logs: u64,
    /// Writes they hold, not yet in segments.
    pub log_writes: u64,
    /// Files an open for writing deletes: leftovers of work a crash cut
    /// short, which the manifest proves obsolete.
    pub redundant: Vec<String>,
    /// Files that are not part of the store, kept and reported.
    pub unaccounted: Vec<Unaccounted>,
}

#[derive(Debug, Default)]
struct Counters {
    writes: AtomicU64,
    flushes: AtomicU64,
    flush_pause_nanos: AtomicU64,
    templates: AtomicU64,
    compactions: AtomicU64,
    compacted_segments: AtomicU64,
    leaves_summarized: AtomicU64,
    leaves_read: AtomicU64,
}

/// State changed only by a flush or a compaction (under this lock).
#[derive(Debug)]
struct Durable {
    /// As on disk.
    manifest: Manifest,
    last_overflow: OverflowStats,
    total_overflow: OverflowStats,
    /// Set when the store closes: the flusher thread writes the frozen
    /// buffer it may hold, then ends.
    stop: bool,
}

/// What the store shares with its flusher thread.
#[derive(Debug)]
struct Shared {
    fs: Arc<dyn Fs>,
    dir: PathBuf,
    options: Options,
    cache: Arc<Cache>,
    view: Arc<RwLock<View>>,
    durable: Mutex<Durable>,
    /// Signalled, under `durable`, when a buffer is frozen (for the
    /// flusher), when its segment is written or failed (for writers
    /// waiting to freeze the next), and when the store closes.
    frozen_changed: Condvar,
    poison: Poison,
    counters: Counters,
    /// The thread that merges resident segments into tiers (unset when
    /// read-only, without a cache, or with `tiers` off); dropping it stops
    /// the thread.
    tiering: OnceLock<Tiering>,
    /// Listed segments a read-only open could not open.
    damaged_segments: u64,
    /// The next log, made ready by the flusher (padded logs only); held
    /// while it is being made.
    spare: Mutex<Option<wal::Spare>>,
    /// Set when making a spare failed: freezes make their logs
    /// themselves from then on.
    spare_failed: std::sync::atomic::AtomicBool,
}

/// A stream index over an append-only segment store; see the crate docs.
///
/// Thread-safe: share it (`&StreamIndex` or an `Arc`) between writers and
/// readers. Writes from several threads are indexed at once. A query sees
/// every batch acknowledged before it started (a write is acknowledged
/// when its call returns), each batch whole or not at all, and nothing
/// written after it started.
#[derive(Debug)]
pub struct StreamIndex {
    shared: Arc<Shared>,
    /// Writers hold it shared while they write to the active buffer; a
    /// flush takes it exclusively to hand the buffer over.
    gate: RwLock<Arc<Buffer>>,
    /// The thread that writes frozen buffers as segments (`None` when
    /// read-only); stopped when the store is dropped.
    flusher: Option<JoinHandle<()>>,
    /// The latest time written (for `ordered_time`), changed under the
    /// active buffer's data lock.
    last_time: AtomicU64,
    /// Opened by [`StreamIndex::open_read_only`].
    read_only: bool,
    /// The directory's `LOCK` file, locked while the store is open (real
    /// file system only).
    lock: Option<DirectoryLock>,
    /// Files the open found that are not part of the store, kept.
    unaccounted: Vec<Unaccounted>,
}

impl StreamIndex {
    /// Opens (creating if needed) the store in directory `path` on the
    /// real file system, locking it against other processes.
    pub fn open(path: impl AsRef<Path>, options: Options) -> Result<StreamIndex> {
        let dir = path.as_ref();
        std::fs::create_dir_all(dir)
            .map_err(|error| Error::io(format!("creating {}", dir.display()), error))?;
        let lock = DirectoryLock::acquire(dir, false, "the stream index")?;
        let mut index = Self::open_on(Arc::new(RealFs::new()), dir, options)?;
        index.lock = lock;
        Ok(index)
    }

    /// Opens the existing store in `path` on the real file system for
    /// queries only: nothing in the directory is changed (the logs are
    /// replayed into memory), writes, flushes and compactions are refused,
    /// and other read-only openers may share it, a writer may not. A
    /// listed segment that is missing or damaged does not fail the open:
    /// the queries that could need it fail, naming it, and the others
    /// are answered.
    pub fn open_read_only(path: impl AsRef<Path>, options: Options) -> Result<StreamIndex> {
        let dir = path.as_ref();
        let lock = DirectoryLock::acquire(dir, true, "the stream index")?;
        let mut index = Self::open_with(Arc::new(RealFs::new()), dir, options, true)?;
        index.lock = lock;
        Ok(index)
    }

    /// Opens the store in `dir` on `fs`: checks every file the manifest
    /// lists and accounts for every other one (see the crate's DESIGN.md,
    /// "Recovery"), then removes the files the manifest proves obsolete,
    /// writes the logs' writes as a segment and starts a new log.
    pub fn open_on(fs: Arc<dyn Fs>, dir: &Path, options: Options) -> Result<StreamIndex> {
        Self::open_with(fs, dir, options, false)
    }

    /// [`StreamIndex::open_read_only`] on `fs` (no lock is taken).
    pub fn open_read_only_on(fs: Arc<dyn Fs>, dir: &Path, options: Options) -> Result<StreamIndex> {
        Self::open_with(fs, dir, options, true)
    }

    fn open_with(fs: Arc<dyn Fs>, dir: &Path, options: Options, read_only: bool) -> Result<StreamIndex> {
        options.check()?;
        if !read_only {
            fs.create_dir_all(dir)?;
        }
        let manifest = match Manifest::read(fs.as_ref(), dir)? {
            Some(manifest) => manifest,
            None => Self::create_manifest(fs.as_ref(), dir, read_only)?,
        };
        let cache = Cache::new(options.cache_bytes);
        // The live logs' writes, replayed into a buffer of no log while
        // the survey checks them.
        let replayed = Self::new_buffer(&options, manifest.next_seq, None, None);
        let mut templates = 0;
        let mut last_time = 0;
        let survey = survey::survey(
            fs.as_ref(),
            dir,
            &manifest,
            &cache,
            &Interrupt::new(),
            |batch, first_seq| {
                templates += u64::from(replayed.insert_replayed(batch, first_seq, &options)?);
                last_time = batch
                    .times
                    .iter()
                    .fold(last_time, |latest, &time| latest.max(time));
                Ok(())
            },
        )?;
        let mut segments = Vec::with_capacity(manifest.segments.len() + 1);
        let mut damaged_segments = 0;
        for (listed, opened) in manifest.segments.iter().zip(survey.segments) {
            let segment = match opened {
                Ok(segment) => segment,
                Err(error) if read_only && error.kind() == ErrorKind::Corruption => {
                    damaged_segments += 1;
                    let meta = SegmentMeta {
                        id: listed.id,
                        store_id: manifest.store_id,
                        first_seq: listed.first_seq,
                        last_seq: listed.last_seq,
                        records: listed.records,
                        leaf_records: 1,
                        leaves: Vec::new(),
                        shadows: Vec::new(),
                        bytes: listed.bytes,
                    };
                    let path = dir.join(segment::file_name(listed.id));
                    Segment::damaged(meta, listed.extent, &path, &error, cache.clone())
                }
                Err(error) => return Err(read_only_hint(error)),
            };
            if let Some(extent) = listed.extent {
                last_time = last_time.max(extent.time_max);
            }
            segments.push(segment);
        }
        let mut manifest = manifest;
        let active = if read_only {
            Arc::new(replayed)
        } else {
            // Every listed file is checked: only now is anything deleted,
            // and only what the manifest proves obsolete.
            for name in &survey.redundant {
                fs.remove_file(&dir.join(name))?;
            }
            manifest.next_segment_id = survey.next_segment_id;
            manifest.next_log_number = survey.next_log_number;
            // The logs' writes become a segment, so that the old logs can go.
            let count = sync::lock(&replayed.data).len() as u64;
            if count > 0 {
                let (records, shadows) = drain(&replayed);
                let id = manifest.next_segment_id;
                let seqs = (replayed.first_seq, replayed.first_seq + count - 1);
                let segment = write_segment(
                    fs.as_ref(),
                    dir,
                    &cache,
                    options.leaf_capacity,
                    (id, manifest.store_id),
                    seqs,
                    &records,
                    &shadows,
                )?;
                segment.adopt(Arc::new(records));
                manifest.next_segment_id = id + 1;
                manifest.next_seq = seqs.1 + 1;
                manifest.segments.push(Listed::of(&segment.meta));
                segments.push(segment);
            }
            debug_assert_eq!(manifest.next_seq, survey.logs_end);
            let header = wal::Header {
                store_id: manifest.store_id,
                number: manifest.next_log_number,
                first_seq: manifest.next_seq,
                padded: options.sync,
            };
            let wal = Wal::create(fs.as_ref(), dir, header)?;
            let active = Self::new_buffer(&options, manifest.next_seq, Some(wal), None);
            let old_logs = std::mem::replace(
                &mut manifest.logs,
                vec![LiveLog {
                    number: header.number,
                    first_seq: header.first_seq,
                }],
            );
            manifest.next_log_number += 1;
            manifest.closed_at = NOT_CLOSED;
            manifest.write(fs.as_ref(), dir)?;
            for old in old_logs {
                fs.remove_file(&dir.join(wal::file_name(old.number)))?;
            }
            Arc::new(active)
        };
        let counters = Counters::default();
        counters.templates.store(templates, Ordering::Relaxed);
        counters.writes.store(survey.log_writes, Ordering::Relaxed);
        let shared = Arc::new(Shared {
            fs,
            dir: dir.to_path_buf(),
            cache,
            view: Arc::new(RwLock::new(View {
                segments,
                tiers: Vec::new(),
                frozen: None,
                active: active.clone(),
            })),
            durable: Mutex::new(Durable {
                manifest,
                last_overflow: OverflowStats::default(),
                total_overflow: OverflowStats::default(),
                stop: false,
            }),
            frozen_changed: Condvar::new(),
            poison: Poison::default(),
            counters,
            tiering: OnceLock::new(),
            damaged_segments,
            spare: Mutex::new(None),
            spare_failed: std::sync::atomic::AtomicBool::new(false),
            options,
        });
        let flusher = if read_only {
            None
        } else {
            let shared = shared.clone();
            let thread = std::thread::Builder::new()
                .name("spillway-flush".into())
                .spawn(move || shared.run_flusher())
                .map_err(|error| Error::io("starting the flusher thread", error))?;
            Some(thread)
        };
        let index = StreamIndex {
            shared,
            gate: RwLock::new(active),
            flusher,
            last_time: AtomicU64::new(last_time),
            read_only,
            lock: None,
            unaccounted: survey.unaccounted,
        };
        if !read_only && index.shared.options.tiers && index.shared.options.cache_bytes > 0 {
            let tiering = Tiering::start(
                index.shared.view.clone(),
                index.shared.cache.clone(),
                index.shared.options.leaf_capacity,
            )?;
            index.shared.tiering.set(tiering).expect("set once, here");
        }
        Ok(index)
    }

    /// The manifest of a directory that has none: a new store's, written
    /// (the directory must hold no segment or log: their list is gone),
    /// or, read-only, an error.
    fn create_manifest(fs: &dyn Fs, dir: &Path, read_only: bool) -> Result<Manifest> {
        let names = if fs.is_dir(dir)? {
            fs.list_dir(dir)?
        } else {
            Vec::new()
        };
        let files: Vec<&String> = names
            .iter()
            .filter(|name| survey::segment_number(name).is_some() || wal::parse_name(name).is_some())
            .collect();
        if let Some(first) = files.first() {
            return Err(Error::corruption(
                dir.join(manifest::FILE_NAME),
                0,
                format!(
                    "missing, but the directory holds {} segment and log files ({first}, ...): the list \
                     of the store's files is gone; `spillway stream repair` rebuilds it from the files",
                    files.len()
                ),
            ));
        }
        if read_only {
            return Err(Error::InvalidArgument(format!(
                "{} holds no stream index (no {} file)",
                dir.display(),
                manifest::FILE_NAME
            )));
        }
        let manifest = Manifest::new(new_store_id());
        manifest.write(fs, dir)?;
        Ok(manifest)
    }

    /// A buffer of writes from `first_seq` on, logged to `wal` (none:
    /// replayed, or read-only), indexed by `template` (none: as the policy
    /// starts).
    fn new_buffer(
        options: &Options,
        first_seq: u64,
        wal: Option<Wal>,
        template: Option<TemplateTree<BufferEntry>>,
    ) -> Buffer {
        let tree = match (template, options.template) {
            (Some(template), _) => BufferTree::Template(RwLock::new(template)),
            // With nothing to go on, the rebuild policy starts from one
            // leaf and cuts it within the buffer from the keys it gets.
            (None, TemplatePolicy::Rebuild { .. }) => {
                BufferTree::Template(RwLock::new(TemplateTree::single_leaf(options.leaf_capacity)))
            }
            (None, _) => {
                BufferTree::Growing(Mutex::new(BPlusTree::new(options.fan_out, options.leaf_capacity)))
            }
        };
        let expected_records = options.buffer_bytes / (RECORD_OVERHEAD_BYTES + 8);
        Buffer {
            first_seq,
            log_number: wal.as_ref().map_or(0, Wal::number),
            tree,
            wal_sync: wal.as_ref().map(|wal| wal.sync().clone()),
            synced_in_background: AtomicU64::new(0),
            data: Mutex::new(BufferData {
                wal,
                ops: Vec::with_capacity(expected_records),
                value_ends: Vec::with_capacity(expected_records),
                values: Vec::new(),
                in_flight: Vec::new(),
            }),
        }
    }

    /// The options the store was opened with.
    pub fn options(&self) -> &Options {
        &self.shared.options
    }

    /// The store's directory.
    pub fn path(&self) -> &Path {
        &self.shared.dir
    }

    fn read_gate(&self) -> std::sync::RwLockReadGuard<'_, Arc<Buffer>> {
        sync::read(&self.gate)
    }

    fn snapshot(&self) -> View {
        sync::read(&self.shared.view).clone()
    }

    /// Appends one record.
    pub fn append(&self, key: u64, time: u64, value: &[u8]) -> Result<()> {
        let mut batch = Batch::new();
        batch.append(key, time, value);
        self.write(&batch)
    }

    /// Replaces every record with `key` and `time` by this one.
    pub fn update(&self, key: u64, time: u64, value: &[u8]) -> Result<()> {
        let mut batch = Batch::new();
        batch.update(key, time, value);
        self.write(&batch)
    }

    /// Removes every record with `key` and `time`.
    pub fn delete(&self, key: u64, time: u64) -> Result<()> {
        let mut batch = Batch::new();
        batch.delete(key, time);
        self.write(&batch)
    }

    /// Writes a batch: logged (and synced, with `sync`), then indexed.
    /// The batch is all or nothing: a bad write in it refuses it whole.
    pub fn write(&self, batch: &Batch) -> Result<()> {
        self.shared.poison.check()?;
        self.check_writable()?;
        if batch.is_empty() {
            return Ok(());
        }
        let batch_bytes = batch.values.len() + batch.len() * RECORD_OVERHEAD_BYTES;
        let (active, first_seq, log_end) = loop {
            let gate = self.read_gate();
            let active = gate.clone();
            let mut data = sync::lock(&active.data);
            if data.len() > 0 && data.bytes() + batch_bytes > self.shared.options.buffer_bytes {
                drop(data);
                drop(gate);
                self.flush_if_active(active.first_seq)?;
                continue;
            }
            let last_time = self.last_time.load(Ordering::Relaxed);
            let latest = batch.check(
                self.shared.options.value_limit(),
                self.shared.options.ordered_time,
                last_time,
            )?;
            let first_seq = active.first_seq + data.len() as u64;
            let log_end = match data.wal.as_mut() {
                Some(wal) => self.shared.poison.guard(|| wal.append(batch, first_seq))?,
                None => 0,
            };
            self.last_time.store(latest, Ordering::Relaxed);
            data.push_batch(batch);
            data.in_flight.push((first_seq, batch.len() as u64));
            let expected_entries = data.expected_entries(&self.shared.options);
            drop(data);
            // Indexing runs with the gate held shared: a flush waits for it.
            let location = first_seq - active.first_seq;
            if active.index(batch, location, &self.shared.options, expected_entries) {
                self.shared.counters.templates.fetch_add(1, Ordering::Relaxed);
            }
            drop(gate);
            break (active, first_seq, log_end);
        };
        let synced = match &active.wal_sync {
            Some(wal_sync) if self.shared.options.sync => {
                self.shared.poison.guard(|| wal_sync.sync_to(log_end))
            }
            _ => Ok(()),
        };
        let mut data = sync::lock(&active.data);
        let position = data
            .in_flight
            .iter()
            .position(|&(seq, _)| seq == first_seq)
            .expect("registered above");
        data.in_flight.swap_remove(position);
        drop(data);
        self.shared
            .counters
            .writes
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        synced
    }

    fn check_writable(&self) -> Result<()> {
        if self.read_only {
            return Err(Error::InvalidArgument(format!(
                "the stream index in {} was opened read-only",
                self.shared.dir.display()
            )));
        }
        Ok(())
    }

    /// Freezes the active buffer if it is still the one that starts at
    /// `first_seq` (a writer found it full). The writer waits while the
    /// buffer frozen before it is being written: two full buffers are as
    /// far as the flusher may fall behind.
    fn flush_if_active(&self, first_seq: u64) -> Result<()> {
        let started = Instant::now();
        let mut durable = self.shared.until_written(sync::lock(&self.shared.durable))?;
        if self.read_gate().first_seq == first_seq {
            self.freeze(&mut durable)?;
        }
        self.shared
            .counters
            .flush_pause_nanos
            .fetch_add(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Writes the active buffer as a segment (if it holds anything) and
    /// starts a new one; returns once the segment is durable.
    pub fn flush(&self) -> Result<()> {
        self.check_writable()?;
        let mut durable = self.shared.until_written(sync::lock(&self.shared.durable))?;
        self.freeze(&mut durable)?;
        self.shared.until_written(durable).map(drop)
    }

    /// Hands the active buffer (if it holds anything) to the flusher
    /// thread and starts a new one. Called with no buffer frozen.
    ///
    /// Writers wait only while the next buffer is made: the old one is
    /// sorted and written after they have moved on. The old log is made
    /// durable whole before the new one is listed (most of it before the
    /// writers are stopped), so that every log but the newest is known
    /// to end where the next one starts.
    fn freeze(&self, durable: &mut Durable) -> Result<()> {
        self.shared.poison.check()?;
        let active = self.read_gate().clone();
        self.sync_log(&active)?;
        let mut gate = sync::write(&self.gate);
        let count = sync::lock(&gate.data).len() as u64;
        if count == 0 {
            return Ok(());
        }
        let old = gate.clone();
        self.sync_log(&old)?;
        let template = self.next_template(durable, &old.tree);
        let mut manifest = durable.manifest.clone();
        // The log the flusher made ready, unless it is being made now.
        let spare = self
            .shared
            .spare
            .try_lock()
            .ok()
            .and_then(|mut spare| spare.take())
            .filter(|_| self.shared.options.sync);
        let number = match &spare {
            Some(spare) => spare.number(),
            None => {
                manifest.next_log_number += 1;
                manifest.next_log_number - 1
            }
        };
        let header = wal::Header {
            store_id: manifest.store_id,
            number,
            first_seq: old.first_seq + count,
            padded: self.shared.options.sync,
        };
        manifest.logs.push(LiveLog {
            number: header.number,
            first_seq: header.first_seq,
        });
        let next = self.shared.poison.guard(|| {
            let wal = match spare {
                Some(spare) => Wal::start(spare, header)?,
                None => Wal::create(self.shared.fs.as_ref(), &self.shared.dir, header)?,
            };
            // Listed before any write goes into it.
            manifest.write(self.shared.fs.as_ref(), &self.shared.dir)?;
            Ok(Self::new_buffer(
                &self.shared.options,
                header.first_seq,
                Some(wal),
                template,
            ))
        })?;
        durable.manifest = manifest;
        *gate = Arc::new(next);
        // Readers switch to the new buffer with the writers, so a write
        // acknowledged in the new buffer is never missed; the old one
        // stays readable until its segment replaces it.
        let mut view = sync::write(&self.shared.view);
        assert!(view.frozen.is_none(), "one buffer frozen at a time");
        view.frozen = Some(old);
        view.active = gate.clone();
        self.shared.frozen_changed.notify_all();
        Ok(())
    }

    /// Makes everything written to `buffer`'s log so far durable.
    fn sync_log(&self, buffer: &Buffer) -> Result<()> {
        let Some(wal_sync) = &buffer.wal_sync else {
            return Ok(());
        };
        let written = sync::lock(&buffer.data).wal.as_ref().map_or(0, Wal::written);
        self.shared.poison.guard(|| wal_sync.sync_to(written))
    }

    /// Picks the index of the next buffer from how the last one went.
    fn next_template(&self, durable: &mut Durable, tree: &BufferTree) -> Option<TemplateTree<BufferEntry>> {
        if let BufferTree::Template(template) = tree {
            let overflow = sync::read(template).overflow_stats();
            durable.total_overflow.leaves += overflow.leaves;
            durable.total_overflow.entries += overflow.entries;
            durable.total_overflow.overflow_entries += overflow.overflow_entries;
            for (total, count) in durable
                .total_overflow
                .overflowed
                .iter_mut()
                .zip(overflow.overflowed)
            {
                *total += count;
            }
            durable.last_overflow = overflow;
        }
        let made = |template: TemplateTree<BufferEntry>| {
            self.shared.counters.templates.fetch_add(1, Ordering::Relaxed);
            Some(template)
        };
        match (self.shared.options.template, tree) {
            (TemplatePolicy::None, _) => None,
            (_, BufferTree::Growing(grown)) => made(TemplateTree::from_tree(&sync::lock(grown))),
            (TemplatePolicy::Rebuild { threshold }, BufferTree::Template(current))
                if durable.last_overflow.calls_for_rebuild(
                    threshold,
                    self.shared.options.fill,
                    self.shared.options.leaf_capacity,
                ) =>
            {
                made(TemplateTree::from_keys(
                    &sync::read(current).sorted_keys(),
                    self.shared.options.fan_out,
                    self.shared.options.leaf_capacity,
                    self.shared.options.fill,
                ))
            }
            (_, BufferTree::Template(current)) => Some(sync::read(current).empty_copy()),
        }
    }

    /// Merges every run of two or more adjacent segments smaller than a
    /// quarter of a buffer into one segment, dropping the records that
    /// updates and deletes replaced (and, for a run that starts at the
    /// oldest segment, the updates' and deletes' marks themselves).
    /// Returns the segments merged.
    pub fn compact(&self) -> Result<u64> {
        self.compact_with_interrupt(&Interrupt::new())
    }

    /// [`StreamIndex::compact`], stopping with [`Error::Interrupted`] once
    /// `interrupt` is raised: between merges, and within a merge before
    /// each segment is read (a merge stopped writes nothing; the merges
    /// done before it stay done).
    pub fn compact_with_interrupt(&self, interrupt: &Interrupt) -> Result<u64> {
        self.check_writable()?;
        let mut durable = sync::lock(&self.shared.durable);
        self.shared.poison.check()?;
        let small = (self.shared.options.buffer_bytes / 4) as u64;
        let mut merged = 0;
        loop {
            interrupt.check()?;
            let segments = self.snapshot().segments;
            // The first run of two or more adjacent small segments.
            let mut run = 0..0;
            let mut start = 0;
            for i in 0..=segments.len() {
                if i == segments.len() || segments[i].meta.bytes >= small {
                    if i - start >= 2 {
                        run = start..i;
                        break;
                    }
                    start = i + 1;
                }
            }
            if run.len() < 2 {
                break;
            }
            self.merge(&mut durable, &segments, run.clone(), interrupt)?;
            merged += run.len() as u64;
            self.shared.counters.compactions.fetch_add(1, Ordering::Relaxed);
            self.shared
                .counters
                .compacted_segments
                .fetch_add(run.len() as u64, Ordering::Relaxed);
        }
        Ok(merged)
    }

    fn merge(
        &self,
        durable: &mut Durable,
        segments: &[Arc<Segment>],
        run: Range<usize>,
        interrupt: &Interrupt,
    ) -> Result<()> {
        let mut all = Records::default();
        let mut shadows = Vec::new();
        for segment in &segments[run.clone()] {
            interrupt.check()?;
            let (records, range) = segment.leaves(0..segment.meta.leaves.len())?;
            for i in range {
                all.push_from(&records, i);
            }
            shadows.extend_from_slice(&segment.meta.shadows);
        }
        shadows.sort_unstable();
        let all = drop_shadowed(sort_records(all), &shadows);
        if run.start == 0 {
            shadows.clear();
        } else {
            newest_shadows(&mut shadows);
        }
        let seqs = (
            segments[run.start].meta.first_seq,
            segments[run.end - 1].meta.last_seq,
        );
        interrupt.check()?;
        self.shared.poison.guard(|| {
            let id = durable.manifest.next_segment_id;
            let segment = self
                .shared
                .write_segment(id, durable.manifest.store_id, seqs, &all, &shadows)?;
            let mut manifest = durable.manifest.clone();
            manifest.next_segment_id = id + 1;
            manifest.segments.splice(run.clone(), [Listed::of(&segment.meta)]);
            manifest.write(self.shared.fs.as_ref(), &self.shared.dir)?;
            durable.manifest = manifest;
            {
                let mut view = sync::write(&self.shared.view);
                view.tiers.retain(|tier| !tier.covers_any(&segments[run.clone()]));
                view.segments.splice(run.clone(), [segment]);
            }
            for old in &segments[run.clone()] {
                self.shared.fs.remove_file(old.path())?;
            }
            Ok(())
        })
    }

    /// The live records with keys and times within `bounds`, sorted by
    /// key, time and sequence number (each source's records are sorted;
    /// they are merged).
    pub fn range(&self, bounds: Bounds) -> Result<Records> {
        let mut records = Records::default();
        self.range_into(bounds, &mut records)?;
        Ok(records)
    }

    /// [`StreamIndex::range`] into `records` (cleared first), reusing its
    /// memory: for a caller that runs many queries, this spares the page
    /// faults of a fresh result each time.
    pub fn range_into(&self, bounds: Bounds, records: &mut Records) -> Result<()> {
        merge::merge_into(&self.select(bounds)?, records);
        Ok(())
    }

    /// Calls `visit(key, time, seq, value)` on every live record within
    /// `bounds`, one source after the other (each segment's records in key
    /// order, then the active buffer's), not in one key order: the
    /// cheapest way through a large result, with nothing copied from
    /// segments held in memory.
    pub fn scan(&self, bounds: Bounds, mut visit: impl FnMut(u64, u64, u64, &[u8])) -> Result<()> {
        for run in self.select(bounds)? {
            let records = &*run.records;
            run.for_each_row(|i| {
                visit(
                    records.keys[i],
                    records.times[i],
                    records.seqs[i],
                    records.value(i),
                )
            });
        }
        Ok(())
    }

    /// The live records within `bounds`, as one run per source: the
    /// segments oldest first, then the buffers (so in the order of their
    /// sequence numbers, as [`merge::merge_into`] needs).
    fn select(&self, bounds: Bounds) -> Result<Vec<Run>> {
        self.shared.poison.check()?;
        if bounds.is_empty() {
            return Ok(Vec::new());
        }
        let view = self.snapshot();
        view.check_damage(&bounds)?;
        // The shadows first: a record is live unless a newer one of them
        // has its key and time.
        let mut buffered = Vec::new();
        let mut shadows = Vec::new();
        for buffer in view.buffers() {
            let mut records = Records::default();
            buffer.collect(&bounds, &buffer.visible(), &mut records, &mut shadows);
            buffered.push(Arc::new(records));
        }
        let sources = view.sources();
        for segment in &sources {
            shadows_within(&segment.meta.shadows, &bounds, &mut shadows);
        }
        shadows.sort_unstable();
        let live = |key, time, seq| {
            shadows.is_empty() || newest_shadow(&shadows, key, time).is_none_or(|newest| newest <= seq)
        };
        let mut runs = Vec::with_capacity(sources.len() + buffered.len());
        for segment in sources {
            if !segment.may_match(&bounds) {
                continue;
            }
            let leaves = segment.meta.leaves_for(bounds.key_low, bounds.key_high);
            self.shared
                .counters
                .leaves_read
                .fetch_add(leaves.len() as u64, Ordering::Relaxed);
            let (records, range) = segment.leaves(leaves)?;
            // The leaves' records with keys in bounds: a span, found by
            // binary search.
            let keys = &records.keys[range.clone()];
            let span = range.start + keys.partition_point(|&key| key < bounds.key_low)
                ..range.start + keys.partition_point(|&key| key <= bounds.key_high);
            let rows = if segment.times_within(&bounds) && shadows.is_empty() {
                Rows::Span(span)
            } else {
                Rows::Picked(
                    span.filter(|&i| {
                        let (key, time, seq) = records.order(i);
                        bounds.contains(key, time) && live(key, time, seq)
                    })
                    .map(|i| i as u32)
                    .collect(),
                )
            };
            runs.push(Run { records, rows });
        }
        for records in buffered {
            let rows = if shadows.is_empty() {
                Rows::Span(0..records.len())
            } else {
                Rows::Picked(
                    (0..records.len())
                        .filter(|&i| {
                            let (key, time, seq) = records.order(i);
                            live(key, time, seq)
                        })
                        .map(|i| i as u32)
                        .collect(),
                )
            };
            runs.push(Run { records, rows });
        }
        Ok(runs)
    }

    /// All live records with `key`.
    pub fn get(&self, key: u64) -> Result<Records> {
        self.range(Bounds::keys(key, key))
    }

    /// Count, sum, min and max of the live records within `bounds`: from
    /// the summaries of the segment leaves that lie wholly inside it (and
    /// that no later update or delete touches), from the records
    /// elsewhere.
    pub fn aggregate(&self, bounds: Bounds) -> Result<Aggregate> {
        self.shared.poison.check()?;
        let mut total = Aggregate::default();
        if bounds.is_empty() {
            return Ok(total);
        }
        let view = self.snapshot();
        view.check_damage(&bounds)?;
        // Every update and delete in range, with the segment it is in
        // (the buffers' are read with their records below).
        let mut newer: Vec<(u64, usize)> = Vec::new();
        let sources = view.sources();
        for (number, segment) in sources.iter().enumerate() {
            let mut within = Vec::new();
            shadows_within(&segment.meta.shadows, &bounds, &mut within);
            newer.extend(within.iter().map(|shadow| (shadow.key, number)));
        }
        let mut rest = Records::default();
        let mut shadows = Vec::new();
        for buffer in view.buffers() {
            buffer.collect(&bounds, &buffer.visible(), &mut rest, &mut shadows);
        }
        // Newer than every segment.
        let buffer_number = sources.len();
        newer.extend(shadows.iter().map(|shadow| (shadow.key, buffer_number)));
        newer.sort_unstable();
        for (number, segment) in sources.into_iter().enumerate() {
            if !segment.may_match(&bounds) {
                continue;
            }
            let leaves = segment.meta.leaves_for(bounds.key_low, bounds.key_high);
            let mut to_read = leaves.start..leaves.start;
            for leaf_number in leaves.clone() {
                let leaf = &segment.meta.leaves[leaf_number];
                let touched = newer[newer.partition_point(|&(key, _)| key < leaf.first_key)..]
                    .iter()
                    .take_while(|&&(key, _)| key <= leaf.last_key)
                    .any(|&(_, by)| by > number);
                let whole = bounds.covers(leaf.first_key, leaf.last_key, leaf.min_time, leaf.max_time);
                if whole && !touched {
                    total.merge(&leaf.aggregate);
                    self.shared
                        .counters
                        .leaves_summarized
                        .fetch_add(1, Ordering::Relaxed);
                    self.read_into(segment, to_read.clone(), &bounds, &mut rest)?;
                    to_read = leaf_number + 1..leaf_number + 1;
                } else {
                    to_read.end = leaf_number + 1;
                }
            }
            self.read_into(segment, to_read, &bounds, &mut rest)?;
            shadows_within(&segment.meta.shadows, &bounds, &mut shadows);
        }
        shadows.sort_unstable();
        let rest = drop_shadowed(sort_records(rest), &shadows);
        for i in 0..rest.len() {
            total.add(rest.value(i));
        }
        Ok(total)
    }

    fn read_into(
        &self,
        segment: &Arc<Segment>,
        leaves: Range<usize>,
        bounds: &Bounds,
        out: &mut Records,
    ) -> Result<()> {
        if leaves.is_empty() {
            return Ok(());
        }
        self.shared
            .counters
            .leaves_read
            .fetch_add(leaves.len() as u64, Ordering::Relaxed);
        let (decoded, range) = segment.leaves(leaves)?;
        for i in range {
            if bounds.contains(decoded.keys[i], decoded.times[i]) {
                out.push_from(&decoded, i);
            }
        }
        Ok(())
    }

    /// Waits until the background work is done: the segment of a full
    /// buffer being written, and the merges into tiers that flushes asked
    /// for (neither is needed for correctness: a query reads the frozen
    /// buffer until its segment replaces it, and whatever tiers exist
    /// when it starts). A flush that failed is reported by the next write.
    pub fn settle(&self) {
        drop(self.shared.until_written(sync::lock(&self.shared.durable)));
        if let Some(tiering) = self.shared.tiering.get() {
            tiering.settle();
        }
    }

    /// Counters and sizes.
    pub fn stats(&self) -> StreamStats {
        let view = self.snapshot();
        let durable = sync::lock(&self.shared.durable);
        let active_records = sync::lock(&view.active.data).len() as u64;
        let (buffer_records, buffer_bytes) = view.buffers().fold((0, 0), |(records, bytes), buffer| {
            let data = sync::lock(&buffer.data);
            (records + data.len() as u64, bytes + data.bytes() as u64)
        });
        let counter = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let tier_counter = |which: fn(&TierCounters) -> &AtomicU64| {
            self.shared
                .tiering
                .get()
                .map_or(0, |tiering| counter(which(&tiering.counters)))
        };
        StreamStats {
            writes: counter(&self.shared.counters.writes),
            next_seq: view.active.first_seq + active_records,
            buffer_records,
            buffer_bytes,
            segments: view.segments.len() as u64,
            segment_records: view.segments.iter().map(|segment| segment.meta.records).sum(),
            segment_bytes: view.segments.iter().map(|segment| segment.meta.bytes).sum(),
            flushes: counter(&self.shared.counters.flushes),
            flush_pause_seconds: counter(&self.shared.counters.flush_pause_nanos) as f64 / 1e9,
            templates: counter(&self.shared.counters.templates),
            template_leaves: match &view.active.tree {
                BufferTree::Template(template) => sync::read(template).leaf_count() as u64,
                BufferTree::Growing(_) => 0,
            },
            last_overflow: durable.last_overflow.clone(),
            total_overflow: durable.total_overflow.clone(),
            compactions: counter(&self.shared.counters.compactions),
            compacted_segments: counter(&self.shared.counters.compacted_segments),
            tiers: view.tiers.len() as u64,
            tier_merges: tier_counter(|counters| &counters.merges),
            tier_records: tier_counter(|counters| &counters.records),
            cache_bytes: self.shared.cache.used() as u64,
            leaves_summarized: counter(&self.shared.counters.leaves_summarized),
            leaves_read: counter(&self.shared.counters.leaves_read),
            unaccounted_files: self.unaccounted.len() as u64,
            damaged_segments: self.shared.damaged_segments,
        }
    }

    /// Checks the store as an open does (the manifest, every listed
    /// segment's footer and index, every live log frame by frame as a
    /// chain, every other file accounted for: see the crate's DESIGN.md,
    /// "Recovery"), then reads every segment file whole and checks every
    /// leaf's checksum, order and summary. Fails with the first problem,
    /// naming the file, as an open for writing would (a read-only open
    /// goes on past a damaged segment; `verify` does not). Flushes and
    /// compactions wait meanwhile; writes go on.
    pub fn verify(&self) -> Result<VerifyReport> {
        self.verify_with_interrupt(&Interrupt::new())
    }

    /// [`StreamIndex::verify`], stopping with [`Error::Interrupted`] once
    /// `interrupt` is raised (checked between files).
    pub fn verify_with_interrupt(&self, interrupt: &Interrupt) -> Result<VerifyReport> {
        let _durable = sync::lock(&self.shared.durable);
        let fs = self.shared.fs.as_ref();
        let dir = &self.shared.dir;
        let manifest = Manifest::read(fs, dir)?.ok_or_else(|| {
            Error::corruption(
                dir.join(manifest::FILE_NAME),
                0,
                "missing, though the store is open; `spillway stream repair` rebuilds it from the files",
            )
        })?;
        // Writers wait while the logs are read: a frame half written when
        // the newest log is read, with a later one whole, would read as
        // damage. (Every frame the log's writer says it wrote is whole
        // while its lock is held.)
        let active = self.read_gate().clone();
        let writers = sync::lock(&active.data);
        // The next log, made ready by the flusher, is not a leftover.
        let spare = sync::lock(&self.shared.spare);
        let survey = survey::survey(fs, dir, &manifest, &Cache::new(0), interrupt, |_, _| Ok(()))?;
        let spare_name = spare.as_ref().map(|spare| wal::file_name(spare.number()));
        drop((spare, writers));
        let mut report = VerifyReport {
            logs: survey.logs,
            log_writes: survey.log_writes,
            redundant: (survey.redundant.into_iter())
                .filter(|name| Some(name) != spare_name.as_ref())
                .collect(),
            unaccounted: survey.unaccounted,
            ..VerifyReport::default()
        };
        for opened in survey.segments {
            interrupt.check()?;
            let segment = opened?;
            let path = segment.path();
            let file = fs.open_read(path)?;
            let len = file.len()? as usize;
            let mut bytes = Vec::with_capacity(len);
            file.read_exact_append(&mut bytes, len, 0)?;
            let meta = segment::check_bytes(path, &bytes)?;
            if meta != segment.meta {
                return Err(Error::corruption(path, 0, "segment changed while it was read"));
            }
            report.segments += 1;
            report.records += meta.records;
            report.leaves += meta.leaves.len() as u64;
            report.bytes += len as u64;
        }
        Ok(report)
    }

    /// Files the open found in the store's directory that are not part
    /// of the store and that nothing proves obsolete (a segment or log
    /// that cannot be read, or of another store): kept where they are.
    /// `verify` reports them too; `repair` moves them into `lost/`.
    pub fn unaccounted(&self) -> &[Unaccounted] {
        &self.unaccounted
    }

    /// Flushes the active buffer (unless read-only) and closes the store.
    pub fn close(self) -> Result<()> {
        if self.read_only {
            return Ok(());
        }
        self.flush()
    }

    /// Repairs the store in directory `path` on the real file system (it
    /// must not be open): if it checks clean, files that are not part of
    /// it are moved into `path/lost/` and nothing else changes; otherwise
    /// its manifest is rebuilt from what the files prove, every record
    /// that reads back is kept, and the files that cannot be used are
    /// moved into `lost/` (nothing is deleted). The report says what was
    /// moved, why, and what was lost. See the crate's DESIGN.md, "Repair".
    pub fn repair(path: impl AsRef<Path>) -> Result<RepairReport> {
        Self::repair_interruptible(path, &Interrupt::new())
    }

    /// [`StreamIndex::repair`], stopping with [`Error::Interrupted`] once
    /// `interrupt` is raised, between files, as long as nothing has been
    /// changed (once the new manifest is written, the repair finishes).
    pub fn repair_interruptible(path: impl AsRef<Path>, interrupt: &Interrupt) -> Result<RepairReport> {
        let dir = path.as_ref();
        let fs = RealFs::new();
        repair::check_is_store(&fs, dir)?;
        let _lock = DirectoryLock::acquire(dir, false, "the stream index")?;
        repair::repair(&fs, dir, interrupt)
    }

    /// [`StreamIndex::repair`] of the store in `dir` on `fs` (no lock is
    /// taken).
    pub fn repair_on(fs: &dyn Fs, dir: &Path, interrupt: &Interrupt) -> Result<RepairReport> {
        repair::repair(fs, dir, interrupt)
    }

    /// Records a clean close (see `Drop`): the frozen buffer is written
    /// and no writer is left.
    fn close_cleanly(&self) -> Result<()> {
        self.shared.poison.check()?;
        let mut durable = sync::lock(&self.shared.durable);
        if sync::read(&self.shared.view).frozen.is_some() {
            return Ok(());
        }
        let active = self.read_gate().clone();
        self.sync_log(&active)?;
        let mut manifest = durable.manifest.clone();
        debug_assert_eq!(
            manifest.logs.last().map(|log| log.number),
            Some(active.log_number)
        );
        manifest.closed_at = active.first_seq + sync::lock(&active.data).len() as u64;
        self.shared
            .poison
            .guard(|| manifest.write(self.shared.fs.as_ref(), &self.shared.dir))?;
        durable.manifest = manifest;
        Ok(())
    }

    /// Whether the store was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
    }
}

impl Shared {
    /// The flusher thread: writes each frozen buffer as a segment, until
    /// the store closes. A failure poisons the store; the buffer then
    /// stays frozen, and in its log for the next open.
    fn run_flusher(&self) {
        let mut durable = sync::lock(&self.durable);
        loop {
            let frozen = sync::read(&self.view).frozen.clone();
            match frozen {
                Some(old) if self.poison.check().is_ok() => {
                    // Reported to writers through the poison.
                    let _ = self.write_frozen(&mut durable, &old);
                    self.frozen_changed.notify_all();
                }
                _ if durable.stop => return,
                _ if self.wants_spare() => durable = self.make_spare(durable),
                _ if self.options.sync => durable = sync::wait(&self.frozen_changed, durable),
                _ => {
                    durable = sync::wait_timeout(&self.frozen_changed, durable, LOG_SYNC_INTERVAL).0;
                    durable = self.sync_active_log(durable);
                }
            }
        }
    }

    /// Without `sync`, makes the active log durable in the background
    /// every [`LOG_SYNC_INTERVAL`] once it has grown by
    /// [`LOG_SYNC_BYTES_MIN`]: a log must be durable whole before the
    /// next one is listed (see `freeze`), and syncing it here leaves that
    /// sync little to do while writers wait. Writers append meanwhile (a
    /// sync holds none of their locks).
    fn sync_active_log<'a>(&'a self, durable: MutexGuard<'a, Durable>) -> MutexGuard<'a, Durable> {
        let active = sync::read(&self.view).active.clone();
        let Some(wal_sync) = &active.wal_sync else {
            return durable;
        };
        let written = sync::lock(&active.data).wal.as_ref().map_or(0, Wal::written);
        let synced = active.synced_in_background.load(Ordering::Relaxed);
        if written < synced + LOG_SYNC_BYTES_MIN || self.poison.check().is_err() {
            return durable;
        }
        drop(durable);
        // Reported to writers through the poison.
        if self.poison.guard(|| wal_sync.sync_to(written)).is_ok() {
            active.synced_in_background.store(written, Ordering::Relaxed);
        }
        sync::lock(&self.durable)
    }

    /// Whether the flusher should make the next log ready now.
    fn wants_spare(&self) -> bool {
        self.options.sync
            && !self.spare_failed.load(Ordering::Relaxed)
            && self.poison.check().is_ok()
            && sync::lock(&self.spare).is_none()
    }

    /// Makes the next log's file ready (see [`wal::Spare`]): its number is
    /// taken under the flush lock, its zeros written without it (a freeze
    /// meanwhile makes its own log). Sized for the log of a full buffer,
    /// about half the buffer's bytes.
    fn make_spare<'a>(&'a self, mut durable: MutexGuard<'a, Durable>) -> MutexGuard<'a, Durable> {
        let number = durable.manifest.next_log_number;
        // Counted now, durable with the next manifest (an open counts past
        // every log file it finds, so a crash before then reuses nothing).
        durable.manifest.next_log_number += 1;
        drop(durable);
        {
            let mut spare = sync::lock(&self.spare);
            let len = (self.options.buffer_bytes as u64 / 2)
                .next_multiple_of(4096)
                .max(64 << 10);
            match wal::Spare::prepare(self.fs.as_ref(), &self.dir, number, len) {
                Ok(made) => *spare = Some(made),
                Err(_) => {
                    self.spare_failed.store(true, Ordering::Relaxed);
                    let _ = self.fs.remove_file(&self.dir.join(wal::file_name(number)));
                }
            }
        }
        sync::lock(&self.durable)
    }

    /// Waits until no buffer is frozen (its segment is written); fails if
    /// the store is poisoned.
    fn until_written<'a>(&self, mut durable: MutexGuard<'a, Durable>) -> Result<MutexGuard<'a, Durable>> {
        while sync::read(&self.view).frozen.is_some() {
            self.poison.check()?;
            durable = sync::wait(&self.frozen_changed, durable);
        }
        self.poison.check()?;
        Ok(durable)
    }

    /// Writes the frozen buffer `old` as a segment, lists it in the
    /// manifest, puts it in the view in the buffer's place and removes
    /// the buffer's log.
    fn write_frozen(&self, durable: &mut Durable, old: &Buffer) -> Result<()> {
        let (records, shadows) = drain(old);
        let seqs = (
            old.first_seq,
            old.first_seq + sync::lock(&old.data).len() as u64 - 1,
        );
        let written = self.poison.guard(|| {
            let id = durable.manifest.next_segment_id;
            let segment = self.write_segment(id, durable.manifest.store_id, seqs, &records, &shadows)?;
            let mut manifest = durable.manifest.clone();
            manifest.next_segment_id = id + 1;
            manifest.next_seq = seqs.1 + 1;
            manifest.segments.push(Listed::of(&segment.meta));
            // The frozen buffer's log is the oldest live one; its writes
            // are in the segment now.
            let oldest = manifest.logs.remove(0);
            debug_assert_eq!(oldest.number, old.log_number);
            manifest.write(self.fs.as_ref(), &self.dir)?;
            durable.manifest = manifest;
            Ok(segment)
        })?;
        written.adopt(Arc::new(records));
        {
            let mut view = sync::write(&self.view);
            view.frozen = None;
            view.segments.push(written);
        }
        if let Some(tiering) = self.tiering.get() {
            tiering.wake();
        }
        self.poison.guard(|| {
            self.fs
                .remove_file(&self.dir.join(wal::file_name(old.log_number)))
        })?;
        self.counters.flushes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn write_segment(
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

impl Drop for StreamIndex {
    /// Stops the flusher thread once it has written the buffer it holds,
    /// then closes the store cleanly: the active log made durable, and
    /// the sequence number it ends at recorded in the manifest, so that a
    /// shorter or older copy of it is noticed at the next open. (A store
    /// that failed is left as a crash would leave it.)
    fn drop(&mut self) {
        if let Some(flusher) = self.flusher.take() {
            sync::lock(&self.shared.durable).stop = true;
            self.shared.frozen_changed.notify_all();
            // A panic in the thread is a bug; the logs still hold what it
            // was writing.
            let _ = flusher.join();
            // Best effort: without it, the next open sees a crash.
            let _ = self.close_cleanly();
            // An unlisted file of zeros: the next open would remove it.
            if let Some(spare) = sync::lock(&self.shared.spare).take() {
                let _ = self
                    .shared
                    .fs
                    .remove_file(&self.shared.dir.join(wal::file_name(spare.number())));
            }
        }
    }
}

/// A random id for a new store (the hasher's keys come from the
/// operating system's random source; the clock and the process id are
/// mixed in as well).
pub(crate) fn new_store_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos());
    hasher.write_u128(now);
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// Adds to a corruption error met by an open for writing where to go
/// from there.
fn read_only_hint(error: Error) -> Error {
    match error {
        Error::Corruption { file, offset, what } => Error::Corruption {
            file,
            offset,
            what: format!(
                "{what}; the store can still be opened read-only, for the queries the damage does not \
                 touch, and `spillway stream repair` salvages the rest"
            ),
        },
        other => other,
    }
}

/// Writes segment `id` of store `store_id` (the pair given as `ids`) in
/// `dir`, syncs it and the directory, and opens it.
#[allow(clippy::too_many_arguments)] // a segment's footer fields, each its own
fn write_segment(
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

/// The sorted, resolved records of a buffer and its shadows.
fn drain(buffer: &Buffer) -> (Records, Vec<Shadow>) {
    let mut entries = Vec::new();
    buffer.tree.extend_range(0, u64::MAX, &mut entries);
    if !entries.is_sorted() {
        entries.sort_unstable();
    }
    let data = sync::lock(&buffer.data);
    let mut records = Records::with_capacity(entries.len(), data.values.len());
    let mut shadows = Vec::new();
    // The records to write, copied a chunk at a time.
    const KEPT_CHUNK: usize = 4096;
    let mut kept: Vec<BufferEntry> = Vec::with_capacity(KEPT_CHUNK);
    let mut group_start = 0;
    while group_start < entries.len() {
        let first = entries[group_start];
        let group_end = group_start
            + entries[group_start..]
                .iter()
                .take_while(|entry| (entry.key, entry.time) == (first.key, first.time))
                .count();
        let group = &entries[group_start..group_end];
        let newest_shadow = group.iter().rposition(|entry| entry.op().shadows());
        if let Some(at) = newest_shadow {
            shadows.push(Shadow {
                key: first.key,
                time: first.time,
                seq: buffer.first_seq + group[at].location(),
            });
        }
        kept.extend(
            group[newest_shadow.unwrap_or(0)..]
                .iter()
                .filter(|entry| entry.op() != Op::Delete),
        );
        if kept.len() >= KEPT_CHUNK {
            data.copy_records(buffer.first_seq, &kept, &mut records);
            kept.clear();
        }
        group_start = group_end;
    }
    data.copy_records(buffer.first_seq, &kept, &mut records);
    (records, shadows)
}

/// Appends the shadows within `bounds`.
fn shadows_within(shadows: &[Shadow], bounds: &Bounds, out: &mut Vec<Shadow>) {
    let start = shadows.partition_point(|shadow| shadow.key < bounds.key_low);
    out.extend(
        shadows[start..]
            .iter()
            .take_while(|shadow| shadow.key <= bounds.key_high)
            .filter(|shadow| bounds.contains(shadow.key, shadow.time)),
    );
}

/// Records in (key, time, seq) order.
fn sort_records(records: Records) -> Records {
    let mut order: Vec<u32> = (0..records.len() as u32).collect();
    order.sort_unstable_by_key(|&i| records.order(i as usize));
    if order.iter().enumerate().all(|(at, &i)| at == i as usize) {
        return records;
    }
    let mut sorted = Records::with_capacity(records.len(), records.values.len());
    for i in order {
        sorted.push_from(&records, i as usize);
    }
    sorted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_entry_holds_short_values_and_its_op_and_orders_by_key_time_and_location() {
        for (op, value) in [
            (Op::Append, &b""[..]),
            (Op::Update, &b"12345678"[..]),
            (Op::Delete, &b"x"[..]),
        ] {
            let entry = BufferEntry::new(7, 9, (1 << 56) - 1, op, value);
            assert_eq!((entry.key, entry.time, entry.location()), (7, 9, (1 << 56) - 1));
            assert_eq!((entry.op(), entry.inline_value()), (op, Some(value)));
        }
        let long = BufferEntry::new(7, 9, 3, Op::Append, b"123456789");
        assert_eq!((long.op(), long.inline_value()), (Op::Append, None));
        let earlier = BufferEntry::new(7, 9, 2, Op::Delete, &[0xff; 8]);
        assert!(earlier < long, "the location breaks ties, not the op or value");
        assert!(BufferEntry::new(6, 10, 9, Op::Append, b"") < earlier);
        assert!(BufferEntry::new(7, 8, 9, Op::Append, b"") < earlier);
    }
}
