//! [`StreamIndex`]: the store. Writes go to the write-ahead log and the
//! active buffer, indexed by a template B+ tree; a full buffer becomes an
//! immutable segment file; queries read a consistent snapshot of the
//! segments and the buffer.

use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::thread::JoinHandle;

use spillway_core::sync;
use spillway_core::{DirectoryLock, Error, Fs, Interrupt, RealFs, Result};

use crate::buffer::{Buffer, BufferTree};
use crate::cache::Cache;
use crate::manifest::{self, Listed, Manifest};
use crate::open;
use crate::options::Options;
use crate::records::sort_records;
use crate::records::{drop_shadowed, newest_shadows, Records};
use crate::repair::{self, RepairReport};
use crate::segment::{self, Segment};
use crate::shared::{Durable, Shared, View};
use crate::stats::StreamStats;
use crate::survey::{self, Unaccounted};
use crate::tier::{TierCounters, Tiering};
use crate::wal;

/// What [`StreamIndex::verify`] checked. Serialized field by field (the
/// front ends' `verify`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
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

/// A stream index over an append-only segment store; see the crate docs.
///
/// Thread-safe: share it (`&StreamIndex` or an `Arc`) between writers and
/// readers. Writes from several threads are indexed at once. A query sees
/// every batch acknowledged before it started (a write is acknowledged
/// when its call returns), each batch whole or not at all, and nothing
/// written after it started.
#[derive(Debug)]
pub struct StreamIndex {
    pub(crate) shared: Arc<Shared>,
    /// Writers hold it shared while they write to the active buffer; a
    /// flush takes it exclusively to hand the buffer over.
    pub(crate) gate: RwLock<Arc<Buffer>>,
    /// The thread that writes frozen buffers as segments (`None` when
    /// read-only); stopped when the store is dropped.
    pub(crate) flusher: Option<JoinHandle<()>>,
    /// The latest time written (for `ordered_time`), changed under the
    /// active buffer's data lock.
    pub(crate) last_time: AtomicU64,
    /// Opened by [`StreamIndex::open_read_only`].
    pub(crate) read_only: bool,
    /// The directory's `LOCK` file, locked while the store is open (real
    /// file system only).
    pub(crate) lock: Option<DirectoryLock>,
    /// Files the open found that are not part of the store, kept.
    pub(crate) unaccounted: Vec<Unaccounted>,
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

    /// Opening (open.rs), then the tiering thread (when it is on).
    fn open_with(fs: Arc<dyn Fs>, dir: &Path, options: Options, read_only: bool) -> Result<StreamIndex> {
        let opened = open::open(fs, dir, options, read_only)?;
        let index = StreamIndex {
            shared: opened.shared,
            gate: RwLock::new(opened.active),
            flusher: opened.flusher,
            last_time: AtomicU64::new(opened.last_time),
            read_only,
            lock: None,
            unaccounted: opened.unaccounted,
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

    /// The options the store was opened with.
    pub fn options(&self) -> &Options {
        &self.shared.options
    }

    /// The store's directory.
    pub fn path(&self) -> &Path {
        &self.shared.dir
    }

    pub(crate) fn read_gate(&self) -> std::sync::RwLockReadGuard<'_, Arc<Buffer>> {
        sync::read(&self.gate)
    }

    pub(crate) fn snapshot(&self) -> View {
        sync::read(&self.shared.view).clone()
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

    /// Waits until the background work is done: the segment of a full
    /// buffer being written, the next log's file made ready (with
    /// `sync`), and the merges into tiers that flushes asked for (none is
    /// needed for correctness: a query reads the frozen buffer until its
    /// segment replaces it, and whatever tiers exist when it starts). A
    /// flush that failed is reported by the next write.
    pub fn settle(&self) {
        if let Ok(mut durable) = self.shared.until_written(sync::lock(&self.shared.durable)) {
            // The flusher makes the spare whenever it wants one (see
            // `run_flusher`) and tells `frozen_changed` when it has.
            while self.flusher.is_some() && !durable.stop && self.shared.wants_spare() {
                durable = sync::wait(&self.shared.frozen_changed, durable);
            }
        }
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

    /// Whether the store was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.read_only
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
