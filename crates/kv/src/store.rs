//! The store's API: opening, writes (the log, then the root buffer), GETs
//! over the roots and the tree, flushes, syncs, closing, statistics. The
//! state it shares with the background worker, and the locks, are in
//! `shared.rs`; opening in `open.rs`; the worker in `worker.rs`.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use spillway_core::sync;
use spillway_core::{ensure, hash64, DirectoryLock, Error, Fs, Interrupt, RealFs, Result};

use crate::batch::WriteBatch;
use crate::cache::FileCache;
use crate::collapse::Folded;
use crate::manifest;
use crate::merge::{AggregateMerge, MergeOperator};
use crate::metrics::{add, get, KvStats};
use crate::open;
use crate::options::{Options, SyncMode};
use crate::record::Kind;
use crate::recovery::{self, Checked};
use crate::repair::{self, RepairReport};
use crate::root::RootBuffer;
use crate::shared::{Frozen, Shared, WorkerExit, WorkerHandle, Writer};
use crate::tree::{Edit, Tree};
use crate::wal::{self, LogHeader, LogTrailer, Wal};

/// How often a caller waiting for the worker looks at its interrupt.
const INTERRUPT_POLL: Duration = Duration::from_millis(20);

/// A WB Tree key-value store.
///
/// # Thread safety
/// `Sync`: any number of threads write and read at once.
#[derive(Debug)]
pub struct Store {
    shared: Arc<Shared>,
    /// The worker; it hands back the manifest when it stops cleanly, for
    /// the close's edit.
    worker: Mutex<Option<WorkerHandle>>,
    _lock: Option<DirectoryLock>,
}

impl Store {
    /// Opens (creating if need be) the store in `path` on the real file
    /// system, locking it against other processes. An open that fails
    /// leaves nothing it created: neither the directory nor the `LOCK`
    /// file nor the files of a store it began to create.
    pub fn open(path: impl AsRef<Path>, options: Options) -> Result<Store> {
        let dir = path.as_ref();
        options.check()?;
        let existed = dir.exists();
        if existed && !dir.is_dir() {
            return Err(Error::InvalidArgument(format!(
                "{} is not a directory: a key-value store is a directory",
                dir.display()
            )));
        }
        std::fs::create_dir_all(dir)
            .map_err(|error| Error::io(format!("creating {}", dir.display()), error))?;
        let before: HashSet<String> = if existed {
            RealFs::new().list_dir(dir)?.into_iter().collect()
        } else {
            HashSet::new()
        };
        let opened = DirectoryLock::acquire(dir, false, "the key-value store").and_then(|lock| {
            let mut store = Self::open_with(Arc::new(RealFs::new()), dir, options, false)?;
            store._lock = lock;
            Ok(store)
        });
        if opened.is_err() {
            open::remove_created(dir, existed, &before);
        }
        opened
    }

    /// Opens the existing store in `path` for reading only: the logs are
    /// replayed into memory and nothing in the directory changes; other
    /// readers may share it, a writer may not. List files that are missing
    /// or damaged do not stop it: the reads that need them fail with a
    /// `Corruption` error naming the file, the others are served. Options
    /// that name no merge operator take the one the store was written
    /// with, if it is an aggregate ([`Store::aggregate`]). A directory
    /// without `CURRENT` is an `InvalidArgument` error ("holds no
    /// key-value store"), unless it holds store files: then it is a
    /// damaged store, a `Corruption` error.
    pub fn open_read_only(path: impl AsRef<Path>, options: Options) -> Result<Store> {
        let dir = path.as_ref();
        let lock = DirectoryLock::acquire(dir, true, "the key-value store")?;
        let mut store = Self::open_with(Arc::new(RealFs::new()), dir, options, true)?;
        store._lock = lock;
        Ok(store)
    }

    /// Opens the store in `dir` on `fs` (no lock is taken).
    pub fn open_on(fs: Arc<dyn Fs>, dir: &Path, options: Options) -> Result<Store> {
        Self::open_with(fs, dir, options, false)
    }

    /// [`Store::open_read_only`] on `fs` (no lock is taken).
    pub fn open_read_only_on(fs: Arc<dyn Fs>, dir: &Path, options: Options) -> Result<Store> {
        Self::open_with(fs, dir, options, true)
    }

    /// Recovery (recovery.rs, through open.rs), then the worker.
    fn open_with(fs: Arc<dyn Fs>, dir: &Path, mut options: Options, read_only: bool) -> Result<Store> {
        if read_only && options.merge_operator.is_none() {
            // A reader opens with whatever aggregate the store was written
            // with. A name that cannot be read or resolved is left to
            // recovery, whose checks name what is wrong.
            let stored = manifest::merge_name(fs.as_ref(), dir).ok().flatten();
            options.merge_operator = stored
                .and_then(|name| AggregateMerge::from_stored_name(&name).ok().flatten())
                .map(|merge| Arc::new(merge) as Arc<dyn MergeOperator>);
        }
        let (shared, worker) = open::open(fs, dir, options, read_only)?;
        Ok(Store {
            shared,
            worker: Mutex::new(worker),
            _lock: None,
        })
    }

    /// Repairs the store in `path` (repair.rs), as LevelDB's and RocksDB's
    /// `RepairDB` do: a store that passes every check (an open's, and every
    /// block read) is left as it is; otherwise its metadata is rebuilt from
    /// what its files' footers and checksums prove, every record that can
    /// be read is kept, what cannot be used is moved into `lost/` (never
    /// deleted), and the report says what was lost. The store must not be
    /// open. Its merge operator is the one it recorded (an aggregate); a
    /// store of another operator is repaired with [`Store::repair_on`].
    pub fn repair(path: impl AsRef<Path>) -> Result<RepairReport> {
        Self::repair_interruptible(path, &Interrupt::new())
    }

    /// [`Store::repair`], stopping with `Interrupted` (having changed
    /// nothing) if `interrupt` is raised before its new files are in place.
    pub fn repair_interruptible(path: impl AsRef<Path>, interrupt: &Interrupt) -> Result<RepairReport> {
        let dir = path.as_ref();
        if !dir.is_dir() {
            return Err(Error::InvalidArgument(format!(
                "{} is not a directory holding a key-value store",
                dir.display()
            )));
        }
        let _lock = DirectoryLock::acquire(dir, false, "the key-value store")?;
        let fs = RealFs::new();
        let merge = repair::stored_merge_name(&fs, dir)
            .and_then(|name| AggregateMerge::from_stored_name(&name).ok().flatten())
            .map(|merge| Arc::new(merge) as Arc<dyn MergeOperator>);
        repair::repair(&fs, dir, merge, interrupt)
    }

    /// [`Store::repair`] of the store in `dir` on `fs` (no lock is taken),
    /// folding merge operands with `merge` (the store's operator).
    pub fn repair_on(
        fs: Arc<dyn Fs>,
        dir: &Path,
        merge: Option<Arc<dyn MergeOperator>>,
        interrupt: &Interrupt,
    ) -> Result<RepairReport> {
        repair::repair(fs.as_ref(), dir, merge, interrupt)
    }

    /// The name of the merge operator the store in `path` was written with
    /// ("" for none), so that a tool can open it with the same one; `None`
    /// when `path` holds no store. Reads the manifest, nothing else.
    pub fn merge_operator_name(path: impl AsRef<Path>) -> Result<Option<String>> {
        manifest::merge_name(&RealFs::new(), path.as_ref()).map_err(recovery::with_hint)
    }

    fn check_open(&self) -> Result<()> {
        ensure!(
            !self.shared.closed.load(Ordering::Acquire),
            InvalidArgument,
            "the key-value store in {} is closed",
            self.shared.dir.display()
        );
        self.shared.poison.check()
    }

    /// Sets `key` to `value`.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut batch = WriteBatch::new();
        batch.put(key, value);
        self.write(&batch)
    }

    /// Removes `key`.
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        let mut batch = WriteBatch::new();
        batch.delete(key);
        self.write(&batch)
    }

    /// Folds `operand` into `key`'s value with the merge operator.
    pub fn merge(&self, key: &[u8], operand: &[u8]) -> Result<()> {
        let mut batch = WriteBatch::new();
        batch.merge(key, operand);
        self.write(&batch)
    }

    /// Checks every write of `batch` before any is applied.
    fn check_batch(&self, batch: &WriteBatch) -> Result<()> {
        let options = &self.shared.options;
        ensure!(
            batch.data_bytes() <= options.root_bytes / 2,
            InvalidArgument,
            "a batch of {} bytes is larger than half the root buffer ({} bytes); write it in parts",
            batch.data_bytes(),
            options.root_bytes
        );
        let (key_len, value_len) = batch.longest();
        options.limits.check_key_len(key_len)?;
        options.limits.check_value_len(value_len)?;
        let Some(merge) = &options.merge_operator else {
            ensure!(
                batch.kind_counts()[Kind::Merge as usize - 1] == 0,
                InvalidArgument,
                "a merge needs a merge operator, and the store was opened without one"
            );
            return Ok(());
        };
        for record in batch.iter() {
            if record.kind != Kind::Delete {
                merge.validate(record.kind, record.value)?;
            }
        }
        Ok(())
    }

    /// Applies `batch` atomically: after a crash either all its writes
    /// are there or none. Returns once it is logged (and synced, in
    /// `SyncMode::Always`).
    pub fn write(&self, batch: &WriteBatch) -> Result<()> {
        self.write_with(batch, None)
    }

    /// [`write`](Self::write), giving up (with `Interrupted`, the batch
    /// not written) if it must wait for a root to spill and `interrupt` is
    /// raised meanwhile. A batch once written to the log is written whole.
    pub fn write_interruptible(&self, batch: &WriteBatch, interrupt: &Interrupt) -> Result<()> {
        interrupt.check()?;
        self.write_with(batch, Some(interrupt))
    }

    fn write_with(&self, batch: &WriteBatch, interrupt: Option<&Interrupt>) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        self.check_open()?;
        self.check_batch(batch)?;
        let shared = &*self.shared;
        let started = Instant::now();
        let (sync, end) = {
            let mut writer = sync::lock(&shared.writer);
            shared.poison.check()?;
            if writer.wal.is_none() {
                return Err(self.unwritable());
            }
            self.make_room(&mut writer, Some(batch), interrupt)?;
            let seq = writer.next_seq;
            let wal = writer.wal.as_mut().expect("checked above");
            let start = wal.written();
            // Into the root while the log's device writes the batch: a
            // batch whose write fails poisons the store, which then answers
            // no reads and writes nothing more, so it is never seen.
            let mut insert = || sync::write(&shared.active).insert_batch(batch);
            let end = shared.poison.guard(|| wal.append(batch, seq, &mut insert))?;
            add(&shared.metrics.wal_bytes, end - start);
            let sync = (shared.options.sync == SyncMode::Always).then(|| wal.sync().clone());
            writer.next_seq += batch.len() as u64;
            let metrics = &shared.metrics;
            let [puts, deletes, merges] = batch.kind_counts();
            add(&metrics.puts, puts);
            add(&metrics.deletes, deletes);
            add(&metrics.merges, merges);
            add(&metrics.user_bytes, batch.user_bytes());
            add(&metrics.write_batches, 1);
            (sync, end)
        };
        if let Some(sync) = sync {
            shared.poison.guard(|| sync.sync_to(end))?;
        }
        shared.metrics.write_latency_us.record(started.elapsed());
        Ok(())
    }

    fn unwritable(&self) -> Error {
        if self.shared.read_only {
            Error::InvalidArgument(format!(
                "the key-value store in {} is open read-only",
                self.shared.dir.display()
            ))
        } else {
            Error::InvalidArgument(format!(
                "the key-value store in {} is closed",
                self.shared.dir.display()
            ))
        }
    }

    /// Freezes the active root if `incoming` would take it past its
    /// budget (or, with no batch coming, if it holds anything), waiting
    /// first for the frozen one to spill.
    fn make_room(
        &self,
        writer: &mut Writer,
        incoming: Option<&WriteBatch>,
        interrupt: Option<&Interrupt>,
    ) -> Result<()> {
        let shared = &*self.shared;
        let full = {
            let active = sync::read(&shared.active);
            match incoming {
                Some(batch) => {
                    !active.is_empty()
                        && active.bytes_with(batch.len(), batch.data_bytes()) > shared.options.root_bytes
                }
                None => !active.is_empty(),
            }
        };
        if !full {
            return Ok(());
        }
        match interrupt {
            Some(interrupt) => self.wait_for_frozen_spill(true, interrupt)?,
            None => self.wait_for_frozen_spill(true, &Interrupt::new())?,
        }
        let (fs, dir) = (shared.fs.as_ref(), &shared.dir);
        let next_seq = writer.next_seq;
        let old = writer.wal.as_mut().expect("a writable store has a log");
        // The chain (wal.rs): the frozen log's writes durable, then the
        // new log (its header durable), then the trailer naming it.
        shared.poison.guard(|| old.sync().sync_to(u64::MAX))?;
        let written = old.written();
        let number = shared.next_file.fetch_add(1, Ordering::Relaxed);
        let header = LogHeader {
            store_id: shared.store_id,
            number,
            previous: old.number(),
            first_seq: next_seq,
            padded: shared.options.sync != SyncMode::None,
            merge_name: shared.merge_name.clone(),
        };
        // Held until the spare is renamed: the worker prepares the next
        // spare under the same name once this one is taken.
        let mut spare = sync::lock(&shared.spare_log);
        spare.wanted = written;
        let over_spare = std::mem::take(&mut spare.ready);
        let wal = shared.poison.guard(|| {
            if over_spare {
                Wal::over_spare(fs, dir, &header)
            } else {
                Wal::create(fs, dir, &header)
            }
        })?;
        drop(spare);
        shared.poison.guard(|| {
            old.seal(LogTrailer {
                next: number,
                end_seq: next_seq,
            })
        })?;
        if over_spare {
            add(&shared.metrics.logs_over_spares, 1);
        }
        *sync::lock(&shared.current_log) = Some(wal.sync().clone());
        writer.wal = Some(wal);
        let seqs = (writer.root_seq_first, next_seq - 1);
        writer.root_seq_first = next_seq;
        {
            let mut active = sync::write(&shared.active);
            let next = sync::lock(&shared.spare_root).take().unwrap_or_default();
            let root = std::mem::replace(&mut *active, next);
            sync::write(&shared.view).frozen = Some(Arc::new(Frozen {
                root: Arc::new(root),
                log_number: number,
                seqs,
            }));
        }
        let _control = sync::lock(&shared.control);
        shared.wake.notify_all();
        Ok(())
    }

    /// Waits until no root is frozen; counts it as a stall if `stall`.
    /// Stops early, failing with `Interrupted`, once `interrupt` is raised.
    fn wait_for_frozen_spill(&self, stall: bool, interrupt: &Interrupt) -> Result<()> {
        let shared = &*self.shared;
        if sync::read(&shared.view).frozen.is_none() {
            return Ok(());
        }
        let started = Instant::now();
        let mut control = sync::lock(&shared.control);
        while sync::read(&shared.view).frozen.is_some() {
            if control.failed {
                shared.poison.check()?;
                return Err(Error::Internal("the worker stopped without recording why".into()));
            }
            interrupt.check()?;
            control = sync::wait_timeout(&shared.progress, control, INTERRUPT_POLL).0;
        }
        drop(control);
        if stall {
            add(&shared.metrics.stalls, 1);
            add(&shared.metrics.stall_us, started.elapsed().as_micros() as u64);
        }
        shared.poison.check()
    }

    /// The value of `key`, or `None` if it has none.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.check_open()?;
        let shared = &*self.shared;
        let started = Instant::now();
        let hash = hash64(key);
        let mut lookup = Lookup::default();
        sync::read(&shared.active).get(hash, key, |kind, value| lookup.add(kind, value));
        if !lookup.done {
            let view = sync::read(&shared.view).clone();
            if let Some(frozen) = &view.frozen {
                frozen.root.get(hash, key, |kind, value| lookup.add(kind, value));
            }
            if !lookup.done {
                let mut buffer = Vec::with_capacity(shared.options.block_bytes as usize);
                let metrics = &shared.metrics;
                view.tree.walk(hash, |node| {
                    // A node's filters are larger than the caches: one
                    // miss each, taken together rather than one by one.
                    for list in node.lists.iter().rev() {
                        list.prefetch_filter(hash);
                    }
                    for list in node.lists.iter().rev() {
                        let reads = list.get(&shared.cache, hash, key, &mut buffer, |kind, value| {
                            lookup.add(kind, value);
                        })?;
                        if reads > 0 {
                            add(&metrics.get_filter_passes, 1);
                            add(&metrics.get_block_reads, u64::from(reads));
                        }
                        if lookup.done {
                            return Ok(false);
                        }
                    }
                    Ok(true)
                })?;
            }
        }
        let answer = lookup.resolve(key, shared.options.merge_operator.as_deref())?;
        add(&shared.metrics.gets, 1);
        if answer.is_some() {
            add(&shared.metrics.get_hits, 1);
        }
        shared.metrics.get_latency_us.record(started.elapsed());
        Ok(answer)
    }

    /// Spills everything written so far into the tree, so that the logs
    /// can go; returns once the root has spilled.
    pub fn flush(&self) -> Result<()> {
        self.flush_interruptible(&Interrupt::new())
    }

    /// [`flush`](Self::flush), giving up the wait (with `Interrupted`) once
    /// `interrupt` is raised; the spill goes on in the background.
    pub fn flush_interruptible(&self, interrupt: &Interrupt) -> Result<()> {
        self.check_open()?;
        {
            let mut writer = sync::lock(&self.shared.writer);
            if writer.wal.is_none() {
                return Err(self.unwritable());
            }
            interrupt.check()?;
            self.make_room(&mut writer, None, Some(interrupt))?;
        }
        self.wait_for_frozen_spill(false, interrupt)
    }

    /// [`flush`](Self::flush), then waits until the worker has nothing left
    /// to do: every node within its capacity and fan-out, and the files no
    /// reader holds deleted. For benchmarks and tests that want a quiet
    /// store; nothing needs it for correctness.
    pub fn settle(&self) -> Result<()> {
        self.settle_interruptible(&Interrupt::new())
    }

    /// [`settle`](Self::settle), giving up the wait (with `Interrupted`)
    /// once `interrupt` is raised; the work goes on in the background.
    pub fn settle_interruptible(&self, interrupt: &Interrupt) -> Result<()> {
        self.flush_interruptible(interrupt)?;
        let shared = &*self.shared;
        let mut control = sync::lock(&shared.control);
        // The pass under way may have looked for files to delete before
        // this call, while a reader of ours still held them: wait for one
        // that began after it.
        let start = control.idle_passes;
        while control.idle_passes < start + 2 {
            if control.failed {
                drop(control);
                shared.poison.check()?;
                return Err(Error::Internal("the worker stopped without recording why".into()));
            }
            drop(control);
            interrupt.check()?;
            control = sync::lock(&shared.control);
            shared.wake.notify_all();
            control = sync::wait_timeout(&shared.progress, control, INTERRUPT_POLL).0;
        }
        Ok(())
    }

    /// Makes every write so far durable (whatever the sync mode).
    pub fn sync(&self) -> Result<()> {
        self.check_open()?;
        let shared = &*self.shared;
        let (sync, written) = {
            let writer = sync::lock(&shared.writer);
            let Some(wal) = writer.wal.as_ref() else {
                return Err(self.unwritable());
            };
            (wal.sync().clone(), wal.written())
        };
        shared.poison.guard(|| sync.sync_to(written))
    }

    /// Stops the worker (after the spill or split it is doing) and makes
    /// the log durable. Later calls fail; closing again does nothing.
    /// Records still in root buffers are in the logs, and the next open
    /// replays them.
    pub fn close(&self) -> Result<()> {
        let shared = &*self.shared;
        if shared.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        {
            let mut control = sync::lock(&shared.control);
            control.shutdown = true;
            shared.wake.notify_all();
            shared.progress.notify_all();
        }
        let exit = match sync::lock(&self.worker).take() {
            Some(handle) => handle
                .join()
                .map_err(|_| Error::Internal("the key-value store's worker thread panicked".into()))?,
            None => None,
        };
        let mut writer = sync::lock(&shared.writer);
        let end_seq = writer.next_seq;
        if let Some(mut wal) = writer.wal.take() {
            shared.poison.check()?;
            // The closing trailer, then the manifest's record of it: after
            // a clean close an older copy of the newest log is told from it.
            shared
                .poison
                .guard(|| wal.seal(LogTrailer { next: 0, end_seq }))?;
            if let Some(WorkerExit {
                mut manifest,
                mut counters,
            }) = exit
            {
                counters.next_file = shared.next_file.load(Ordering::Relaxed);
                counters.newest_log = wal.number();
                counters.closed_seq = Some(end_seq);
                let mut payload = Vec::new();
                manifest::encode_edit(&Edit::default(), counters, &mut payload);
                shared.poison.guard(|| manifest.append(&payload))?;
            }
            if std::mem::take(&mut sync::lock(&shared.spare_log).ready) {
                // Only zeros: the next open would delete it anyway.
                shared.fs.remove_file(&shared.dir.join(wal::SPARE_NAME))?;
            }
        }
        Ok(())
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// The options it was opened with.
    pub fn options(&self) -> &Options {
        &self.shared.options
    }

    /// The current tree version (for scans, `verify` and `dump`).
    pub(crate) fn snapshot(&self) -> (Arc<RootBuffer>, Option<Arc<RootBuffer>>, Arc<Tree>) {
        let active = sync::read(&self.shared.active);
        let view = sync::read(&self.shared.view).clone();
        let active = Arc::new(active.clone());
        (active, view.frozen.map(|frozen| frozen.root.clone()), view.tree)
    }

    /// Runs recovery's checks (recovery.rs) on the store's directory as it
    /// is now. For a store open for writing the writers' lock is held and
    /// the worker stopped between changes meanwhile, so that the checks
    /// see a directory no one changes (but for a rewrite's new files,
    /// which the tree does not name yet).
    /// Returns the store's version of the moment too, taken while the
    /// directory is as the checks saw it.
    #[allow(clippy::type_complexity)]
    pub(crate) fn check_directory(
        &self,
    ) -> Result<(Checked, (Arc<RootBuffer>, Option<Arc<RootBuffer>>, Arc<Tree>))> {
        self.check_open()?;
        let shared = &*self.shared;
        let missing = || Error::Corruption {
            file: shared.dir.join(manifest::CURRENT),
            offset: 0,
            what: "missing: the store's directory lost the file that names its manifest".into(),
        };
        if shared.read_only {
            let checked =
                recovery::check(shared.fs.as_ref(), &shared.dir, true, false)?.ok_or_else(missing)?;
            return Ok((checked, self.snapshot()));
        }
        // Writers first: a writer waiting for a root to spill holds their
        // lock, and the worker must be free to spill it.
        let writer = sync::lock(&shared.writer);
        {
            let mut control = sync::lock(&shared.control);
            control.pause_requests += 1;
            shared.wake.notify_all();
            while !control.paused && !control.failed && !control.shutdown {
                control = sync::wait_timeout(&shared.progress, control, INTERRUPT_POLL).0;
            }
        }
        let checked = recovery::check(shared.fs.as_ref(), &shared.dir, false, false);
        let snapshot = self.snapshot();
        {
            let mut control = sync::lock(&shared.control);
            control.pause_requests -= 1;
            shared.wake.notify_all();
        }
        drop(writer);
        let mut checked = checked?.ok_or_else(missing)?;
        // The spare log is the store's own, prepared for the next freeze.
        checked.removable.retain(|name| name != wal::SPARE_NAME);
        Ok((checked, snapshot))
    }

    /// The open-file cache and the merge operator, for scans.
    pub(crate) fn cache(&self) -> &Arc<FileCache> {
        &self.shared.cache
    }

    /// The aggregate function the store merges with, if its merge
    /// operator is one: what a reader shows a stored value as.
    pub fn aggregate(&self) -> Option<&AggregateMerge> {
        self.options().merge_operator.as_deref()?.aggregate()
    }

    /// Statistics.
    pub fn stats(&self) -> KvStats {
        let shared = &*self.shared;
        let metrics = &shared.metrics;
        let (root_records, root_bytes) = {
            let active = sync::read(&shared.active);
            (active.len() as u64, active.bytes() as u64)
        };
        let view = sync::read(&shared.view).clone();
        let (frozen_records, frozen_bytes) = view.frozen.as_ref().map_or((0, 0), |frozen| {
            (frozen.root.len() as u64, frozen.root.bytes() as u64)
        });
        let tree = &view.tree;
        let files = tree.files();
        let root_spills = sync::lock(&shared.control).root_spills;
        let damage = sync::lock(&shared.damage).clone();
        let user_bytes = get(&metrics.user_bytes);
        let wal_bytes = get(&metrics.wal_bytes);
        let list_records: u64 = files.values().map(|file| file.records()).sum();
        let index_memory_bytes: u64 = files.values().map(|file| file.index_memory_bytes() as u64).sum();
        let list_bytes_written = get(&metrics.list_bytes_written);
        KvStats {
            puts: get(&metrics.puts),
            deletes: get(&metrics.deletes),
            merges: get(&metrics.merges),
            write_batches: get(&metrics.write_batches),
            user_bytes,
            wal_bytes,
            gets: get(&metrics.gets),
            get_hits: get(&metrics.get_hits),
            get_block_reads: get(&metrics.get_block_reads),
            get_filter_passes: get(&metrics.get_filter_passes),
            root_records: root_records + frozen_records,
            root_bytes: root_bytes + frozen_bytes,
            root_spills,
            node_spills: get(&metrics.node_spills),
            slow_splits: get(&metrics.slow_splits),
            collapses: get(&metrics.collapses),
            fast_splits: get(&metrics.fast_splits),
            divides: get(&metrics.divides),
            grows: get(&metrics.grows),
            forced: get(&metrics.forced),
            spills_beside_rewrites: get(&metrics.spills_beside_rewrites),
            stall_seconds: get(&metrics.stall_us) as f64 / 1e6,
            stalls: get(&metrics.stalls),
            height: tree.height() as u64,
            nodes: tree.len() as u64,
            leaves: tree.leaves().len() as u64,
            lists: tree.nodes().map(|node| node.lists.len() as u64).sum(),
            list_files: files.len() as u64,
            list_file_bytes: files.values().map(|file| file.file_bytes()).sum(),
            list_records,
            index_memory_bytes,
            index_bytes_per_record: index_memory_bytes as f64 / list_records.max(1) as f64,
            list_bytes_written,
            list_bytes_read: get(&metrics.list_bytes_read),
            records_spilled: get(&metrics.records_spilled),
            write_amplification: (wal_bytes + list_bytes_written) as f64 / user_bytes.max(1) as f64,
            manifest_rewrites: get(&metrics.manifest_rewrites),
            logs_over_spares: get(&metrics.logs_over_spares),
            files_removed: get(&metrics.files_removed),
            file_opens: shared.cache.opens(),
            damaged_nodes: damage.len() as u64,
            damage,
            write_latency_us: metrics.write_latency_us.snapshot(),
            get_latency_us: metrics.get_latency_us.snapshot(),
            spill_latency_us: metrics.spill_latency_us.snapshot(),
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // Errors surface through `close`; a drop can only try.
        let _ = self.close();
    }
}

/// One key's records found by a GET, newest first, until a PUT or DELETE
/// settles it.
#[derive(Debug, Default)]
struct Lookup {
    found: Vec<(Kind, Vec<u8>)>,
    done: bool,
}

impl Lookup {
    /// Adds the next older record; returns whether to look further.
    fn add(&mut self, kind: Kind, value: &[u8]) -> bool {
        self.found.push((kind, value.to_vec()));
        self.done = kind != Kind::Merge;
        !self.done
    }

    fn resolve(self, key: &[u8], merge: Option<&dyn MergeOperator>) -> Result<Option<Vec<u8>>> {
        let mut records = self.found.into_iter().rev();
        let Some((kind, value)) = records.next() else {
            return Ok(None);
        };
        let mut folded = Folded::default();
        folded.start(kind, &value);
        for (kind, value) in records {
            folded.apply(key, kind, &value, merge)?;
        }
        Ok(folded.into_answer())
    }
}
