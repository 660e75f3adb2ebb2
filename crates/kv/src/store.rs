//! The store: the write path (log, then root buffer), GETs over the roots
//! and the tree, and the background worker that spills and splits.
//!
//! # Concurrency
//!
//! ```text
//! writers ── writer lock ──► log ──► active root ──full──► frozen root ──worker──► tree version
//! readers ──────────────────────────► active root, then one view { frozen root, tree version }
//! ```
//!
//! - Writers append under one lock (the log keeps the order), then, in
//!   `SyncMode::Always`, wait for the log's sync outside it, so writers
//!   that wait together share one fsync. A batch goes into the active
//!   root while the log's direct write of it is in flight
//!   (`FsFile::write_at_overlapped`), so the writer's own work hides in
//!   the device's round trip instead of following it.
//! - A full active root is frozen: its log is sealed, a new log started
//!   (over the spare of zeros the worker prepared, when there is one), and
//!   the root moves into the view, where the worker spills it while a
//!   fresh root takes writes. Writers stall only when a root fills while
//!   the frozen one is still spilling; the stall is measured.
//! - The worker alone changes the tree. Every spill or split writes its
//!   lists, makes its edit durable in the manifest, and only then installs
//!   the new version (and drops the frozen root) in one step. A long
//!   rewrite (internal spill, slow split) is computed on a thread of its
//!   own while the worker goes on spilling roots; its edit is carried over
//!   to the lists those spills appended before it is installed.
//! - A reader looks at the active root, then clones the view: a frozen
//!   root is moved into the view under the active root's write lock, so a
//!   record is always in one of the two places the reader looks.
//!
//! Lock order: writer → spare log, writer → active → view; control alone
//! (nothing is taken while it is held but the view, for reading).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use spillway_core::log::LogSync;
use spillway_core::sync;
use spillway_core::HistogramSnapshot;
use spillway_core::{
    ensure, hash64, DirectoryLock, Error, ErrorKind, Fs, Histogram, Interrupt, Poison, RealFs, Result,
};

use crate::batch::WriteBatch;
use crate::cache::FileCache;
use crate::collapse::Folded;
use crate::list::{self, FileNumber, ListFile};
use crate::manifest::{self, Counters, ManifestWriter};
use crate::merge::{AggregateMerge, MergeOperator};
use crate::options::{Options, SyncMode};
use crate::record::Kind;
use crate::recovery::{self, Checked};
use crate::repair::{self, RepairReport};
use crate::root::RootBuffer;
use crate::spill::{self, Job};
use crate::split::{self, SlowSplit};
use crate::tree::{Edit, Node, NodeId, Tree, ROOT};
use crate::wal::{self, LogHeader, LogTrailer, Wal};

/// How long the idle worker sleeps before it looks for files to delete.
const IDLE_WAKE: Duration = Duration::from_millis(200);
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
    worker: Mutex<Option<JoinHandle<Option<WorkerExit>>>>,
    _lock: Option<DirectoryLock>,
}

/// What the worker hands back when it stops without a failure.
#[derive(Debug)]
struct WorkerExit {
    manifest: ManifestWriter,
    counters: Counters,
}

/// A root buffer being spilled.
#[derive(Debug)]
struct Frozen {
    root: Arc<RootBuffer>,
    /// The log started when it froze: logs below it hold only its records
    /// (and older ones already in the tree).
    log_number: u64,
    /// The sequence numbers of the writes it holds, first and last: its
    /// lists record them (list.rs).
    seqs: (u64, u64),
}

/// What readers see besides the active root.
#[derive(Debug, Clone)]
struct View {
    frozen: Option<Arc<Frozen>>,
    tree: Arc<Tree>,
}

#[derive(Debug)]
struct Writer {
    /// `None` for a read-only store and once closed.
    wal: Option<Wal>,
    next_seq: u64,
    /// The sequence number of the first write the active root may hold.
    root_seq_first: u64,
}

/// The next log, prepared ahead of the freeze that needs it (wal.rs).
#[derive(Debug, Default)]
struct SpareLog {
    /// [`wal::SPARE_NAME`] is written and synced, and no one writes it.
    ready: bool,
    /// Bytes the last frozen root's log held: the size of the next spare.
    wanted: u64,
}

#[derive(Debug, Default)]
struct Control {
    shutdown: bool,
    /// The worker stopped on an error (the store is poisoned).
    failed: bool,
    /// Root spills completed.
    root_spills: u64,
    /// Times the worker found nothing to do (after removing obsolete files).
    idle_passes: u64,
    /// The rewrite thread has ended (its result waits to be installed).
    rewrite_ended: bool,
    /// Callers (`verify`) that want the worker to stop between changes.
    pause_requests: u32,
    /// The worker is stopped between changes for them.
    paused: bool,
}

#[derive(Debug)]
struct Shared {
    fs: Arc<dyn Fs>,
    dir: PathBuf,
    options: Options,
    /// The store's identity, in its manifest, logs and list files.
    store_id: u64,
    /// The merge operator's name ("" for none), in every log header.
    merge_name: String,
    read_only: bool,
    /// What background work found damaged (a corrupt block met by a
    /// spill or a rewrite): the node and the error, one entry each.
    damage: Mutex<Vec<String>>,
    closed: AtomicBool,
    poison: Poison,
    cache: Arc<FileCache>,
    next_file: AtomicU64,
    writer: Mutex<Writer>,
    /// The log being written, for the worker's periodic sync.
    current_log: Mutex<Option<Arc<LogSync>>>,
    /// A spilled root, emptied, to be the next active one.
    spare_root: Mutex<Option<RootBuffer>>,
    /// The spare log the worker prepares for the next freeze.
    spare_log: Mutex<SpareLog>,
    active: RwLock<RootBuffer>,
    view: RwLock<View>,
    control: Mutex<Control>,
    /// Wakes the worker: a root froze, or the store closes.
    wake: Condvar,
    /// Wakes writers and flushes: a root spilled, or the worker failed.
    progress: Condvar,
    metrics: Metrics,
}

/// Counters and histograms, updated without locks.
#[derive(Debug, Default)]
struct Metrics {
    puts: AtomicU64,
    deletes: AtomicU64,
    merges: AtomicU64,
    write_batches: AtomicU64,
    user_bytes: AtomicU64,
    wal_bytes: AtomicU64,
    gets: AtomicU64,
    get_hits: AtomicU64,
    get_block_reads: AtomicU64,
    get_filter_passes: AtomicU64,
    node_spills: AtomicU64,
    slow_splits: AtomicU64,
    collapses: AtomicU64,
    fast_splits: AtomicU64,
    divides: AtomicU64,
    grows: AtomicU64,
    forced: AtomicU64,
    spills_beside_rewrites: AtomicU64,
    list_bytes_written: AtomicU64,
    list_bytes_read: AtomicU64,
    records_spilled: AtomicU64,
    manifest_rewrites: AtomicU64,
    logs_over_spares: AtomicU64,
    files_removed: AtomicU64,
    stalls: AtomicU64,
    stall_us: AtomicU64,
    write_latency_us: Histogram,
    get_latency_us: Histogram,
    spill_latency_us: Histogram,
}

fn add(counter: &AtomicU64, amount: u64) {
    counter.fetch_add(amount, Ordering::Relaxed);
}

fn get(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// A store's statistics at one moment.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KvStats {
    /// PUT records written (batches included) since the store was opened.
    pub puts: u64,
    /// DELETE records written.
    pub deletes: u64,
    /// MERGE records written.
    pub merges: u64,
    /// Write calls (batches).
    pub write_batches: u64,
    /// Bytes of keys and values written.
    pub user_bytes: u64,
    /// Bytes appended to write-ahead logs.
    pub wal_bytes: u64,
    /// GETs answered.
    pub gets: u64,
    /// GETs that found a value.
    pub get_hits: u64,
    /// List blocks GETs read from files (device reads, unless cached).
    pub get_block_reads: u64,
    /// Lists whose filter a GET's key passed (the rest were skipped).
    pub get_filter_passes: u64,
    /// Records in the root buffers (active and frozen).
    pub root_records: u64,
    /// Bytes the root buffers account for.
    pub root_bytes: u64,
    /// Root buffers spilled into the tree.
    pub root_spills: u64,
    /// Internal nodes spilled.
    pub node_spills: u64,
    /// Leaves slow-split into two.
    pub slow_splits: u64,
    /// Slow splits that kept one leaf (collapsing freed half a node).
    pub collapses: u64,
    /// Leaves fast-split.
    pub fast_splits: u64,
    /// Nodes that gave half their children to a new sibling.
    pub divides: u64,
    /// Levels the tree grew.
    pub grows: u64,
    /// Spills and slow splits forced by too many lists in a node
    /// (`lists_max`, `false_positives_max`) or by repeated keys (unique
    /// ratio).
    pub forced: u64,
    /// Root spills done while an internal spill or a slow split was being
    /// computed on the rewrite thread.
    pub spills_beside_rewrites: u64,
    /// Time writers waited for a root to spill, in seconds, and how often.
    pub stall_seconds: f64,
    /// Writes that waited for a root to spill.
    pub stalls: u64,
    /// Levels below the root.
    pub height: u64,
    /// Nodes (the root included).
    pub nodes: u64,
    /// Leaves.
    pub leaves: u64,
    /// Lists held by nodes.
    pub lists: u64,
    /// List files (a fast split shares one between leaves).
    pub list_files: u64,
    /// Bytes of list files.
    pub list_file_bytes: u64,
    /// Records in list files (every version, not yet collapsed).
    pub list_records: u64,
    /// Memory of the filters, first-hash indexes and sketches.
    pub index_memory_bytes: u64,
    /// Bytes of list files written by spills and splits.
    pub list_bytes_written: u64,
    /// Bytes of list blocks read by spills and splits.
    pub list_bytes_read: u64,
    /// Records read by spills and splits.
    pub records_spilled: u64,
    /// Manifests rewritten from a snapshot.
    pub manifest_rewrites: u64,
    /// Logs started over a spare of zeros the worker prepared, whose
    /// syncs skip the journal commit of an append (wal.rs); the others
    /// were appended to.
    pub logs_over_spares: u64,
    /// List files deleted once nothing referred to them.
    pub files_removed: u64,
    /// List files opened by reads.
    pub file_opens: u64,
    /// Nodes that background work found damaged (a corrupt block): they
    /// are spilled and split no more until the store is repaired, and
    /// reads that need the damaged block fail.
    pub damaged_nodes: u64,
    /// What was found damaged, one line per node.
    pub damage: Vec<String>,
    /// Write latency, in microseconds.
    pub write_latency_us: HistogramSnapshot,
    /// GET latency, in microseconds.
    pub get_latency_us: HistogramSnapshot,
    /// Spill and split latency, in microseconds.
    pub spill_latency_us: HistogramSnapshot,
}

impl KvStats {
    /// Bytes of memory the indexes take per list record.
    pub fn index_bytes_per_record(&self) -> f64 {
        self.index_memory_bytes as f64 / self.list_records.max(1) as f64
    }

    /// Bytes written to logs and lists over bytes of keys and values written.
    pub fn write_amplification(&self) -> f64 {
        (self.wal_bytes + self.list_bytes_written) as f64 / self.user_bytes.max(1) as f64
    }
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
            Self::remove_created(dir, existed, &before);
        }
        opened
    }

    /// After a failed open: removes what it created in `dir` (the `LOCK`
    /// file, the files of a store it began to create, the directory if it
    /// made it). A store that existed keeps every file it had; the files
    /// an open of it made are the chain's and the next open accounts for
    /// them.
    fn remove_created(dir: &Path, existed: bool, before: &HashSet<String>) {
        let fs = RealFs::new();
        let had_store = before.contains(manifest::CURRENT);
        let Ok(names) = fs.list_dir(dir) else {
            return;
        };
        for name in names {
            let created_by_us = !before.contains(&name)
                && (name == "LOCK" || (!had_store && recovery::looks_like_store_file(&name)));
            if created_by_us {
                let _ = fs.remove_file(&dir.join(&name));
            }
        }
        if !existed {
            let _ = fs.remove_dir(dir);
        }
    }

    /// Opens the existing store in `path` for reading only: the logs are
    /// replayed into memory and nothing in the directory changes; other
    /// readers may share it, a writer may not. List files that are missing
    /// or damaged do not stop it: the reads that need them fail with a
    /// `Corruption` error naming the file, the others are served.
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

    /// Recovery (recovery.rs): checks that the manifest, the list files it
    /// names and the chain of logs account for every write, and only then
    /// removes the files they make redundant; replays the logs into the
    /// root buffer, starts a new log (recorded in the manifest) and the
    /// worker.
    fn open_with(fs: Arc<dyn Fs>, dir: &Path, options: Options, read_only: bool) -> Result<Store> {
        options.check()?;
        let merge_name = options
            .merge_operator
            .as_ref()
            .map_or(String::new(), |merge| merge.name());
        let padded = options.sync != SyncMode::None;
        if !read_only {
            fs.create_dir_all(dir)?;
        }
        let checked = recovery::check(fs.as_ref(), dir, read_only, true)?;
        let (tree, root, counters, store_id, next_seq, wal, manifest) = match checked {
            Some(checked) => {
                let Checked {
                    recovered,
                    root,
                    next_seq,
                    chain,
                    removable,
                    ..
                } = checked;
                if recovered.merge_name != merge_name {
                    return Err(Error::InvalidArgument(format!(
                        "the store in {} was written with merge operator {:?}, it is opened with {:?}",
                        dir.display(),
                        recovered.merge_name,
                        merge_name
                    )));
                }
                let mut counters = recovered.counters;
                let (wal, manifest) = if read_only {
                    (None, None)
                } else {
                    // The checks passed: the tree and the chain hold every
                    // write, so these hold nothing needed.
                    for name in &removable {
                        fs.remove_file(&dir.join(name))?;
                    }
                    if !removable.is_empty() {
                        fs.sync_dir(dir)?;
                    }
                    let newest = *chain.last().expect("a chain holds a log");
                    // Its writes were read, maybe from the page cache
                    // alone: durable before a log that follows them is.
                    fs.open_read_write(&dir.join(wal::file_name(newest)))?
                        .sync_data()?;
                    let mut manifest = ManifestWriter::reopen(fs.as_ref(), dir, &recovered)?;
                    let number = counters.next_file.max(highest_file_number(fs.as_ref(), dir)? + 1);
                    let wal = Wal::create(
                        fs.as_ref(),
                        dir,
                        &LogHeader {
                            store_id: recovered.store_id,
                            number,
                            previous: newest,
                            first_seq: next_seq,
                            padded,
                            merge_name: merge_name.clone(),
                        },
                    )?;
                    counters.next_file = number + 1;
                    counters.newest_log = number;
                    counters.closed_seq = None;
                    let mut payload = Vec::new();
                    manifest::encode_edit(&Edit::default(), counters, &mut payload);
                    manifest.append(&payload)?;
                    (Some(wal), Some(manifest))
                };
                (
                    recovered.tree,
                    root,
                    counters,
                    recovered.store_id,
                    next_seq,
                    wal,
                    manifest,
                )
            }
            None if read_only => {
                let names = if fs.is_dir(dir)? {
                    fs.list_dir(dir)?
                } else {
                    Vec::new()
                };
                if let Some(name) = names.iter().find(|name| recovery::looks_like_store_file(name)) {
                    return Err(Error::corruption(
                        dir.join(manifest::CURRENT),
                        0,
                        format!(
                            "missing, but the directory holds {name}: the store lost the file that names its manifest \
                             (run `spillway kv repair` to rebuild it)"
                        ),
                    ));
                }
                return Err(Error::InvalidArgument(format!(
                    "{} holds no key-value store (no {} file)",
                    dir.display(),
                    manifest::CURRENT
                )));
            }
            None => {
                clear_interrupted_creation(fs.as_ref(), dir)?;
                let store_id = new_store_id(dir);
                let log_number = 2;
                let wal = Wal::create(
                    fs.as_ref(),
                    dir,
                    &LogHeader {
                        store_id,
                        number: log_number,
                        previous: 0,
                        first_seq: 0,
                        padded,
                        merge_name: merge_name.clone(),
                    },
                )?;
                let counters = Counters {
                    next_file: log_number + 1,
                    next_node: 2,
                    log_number,
                    log_seq: 0,
                    newest_log: log_number,
                    closed_seq: None,
                };
                let tree = Tree::empty();
                let mut snapshot = Vec::new();
                manifest::encode_snapshot(&tree, store_id, counters, &merge_name, &mut snapshot);
                let manifest = ManifestWriter::create(fs.as_ref(), dir, 1, &snapshot)?;
                (
                    tree,
                    RootBuffer::new(),
                    counters,
                    store_id,
                    0,
                    Some(wal),
                    Some(manifest),
                )
            }
        };
        let next_file = counters.next_file.max(highest_file_number(fs.as_ref(), dir)? + 1);
        let cache = Arc::new(FileCache::new(fs.clone(), options.limits.open_files_max));
        let view = View {
            frozen: None,
            tree: Arc::new(tree),
        };
        let current_log = wal.as_ref().map(|wal| wal.sync().clone());
        let shared = Arc::new(Shared {
            fs: fs.clone(),
            dir: dir.to_path_buf(),
            store_id,
            merge_name,
            read_only,
            damage: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
            poison: Poison::default(),
            cache,
            next_file: AtomicU64::new(next_file),
            writer: Mutex::new(Writer {
                wal,
                next_seq,
                root_seq_first: counters.log_seq,
            }),
            current_log: Mutex::new(current_log),
            spare_root: Mutex::new(None),
            spare_log: Mutex::new(SpareLog::default()),
            active: RwLock::new(root),
            view: RwLock::new(view),
            control: Mutex::new(Control::default()),
            wake: Condvar::new(),
            progress: Condvar::new(),
            metrics: Metrics::default(),
            options,
        });
        let worker = match manifest {
            Some(manifest) => {
                let worker = Worker {
                    shared: shared.clone(),
                    manifest,
                    counters,
                    obsolete: Vec::new(),
                    unique_ratios: HashMap::new(),
                    damaged: HashSet::new(),
                    last_sync: Instant::now(),
                    rewrite: None,
                };
                let handle = std::thread::Builder::new()
                    .name("spillway-kv".into())
                    .spawn(move || worker.run())
                    .map_err(|error| Error::io("starting the key-value store's worker thread", error))?;
                Some(handle)
            }
            None => None,
        };
        let store = Store {
            shared,
            worker: Mutex::new(worker),
            _lock: None,
        };
        Ok(store)
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
        KvStats {
            puts: get(&metrics.puts),
            deletes: get(&metrics.deletes),
            merges: get(&metrics.merges),
            write_batches: get(&metrics.write_batches),
            user_bytes: get(&metrics.user_bytes),
            wal_bytes: get(&metrics.wal_bytes),
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
            list_records: files.values().map(|file| file.records()).sum(),
            index_memory_bytes: files.values().map(|file| file.index_memory_bytes() as u64).sum(),
            list_bytes_written: get(&metrics.list_bytes_written),
            list_bytes_read: get(&metrics.list_bytes_read),
            records_spilled: get(&metrics.records_spilled),
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

/// The highest number of a list file, log or manifest in `dir` (0 if none).
fn highest_file_number(fs: &dyn Fs, dir: &Path) -> Result<u64> {
    Ok(fs
        .list_dir(dir)?
        .iter()
        .filter_map(|name| {
            list::parse_name(name)
                .or_else(|| wal::parse_name(name))
                .or_else(|| manifest::parse_name(name))
        })
        .max()
        .unwrap_or(0))
}

/// A new store's identity: random enough that two stores never share one
/// (the time, the process, the directory and a counter, hashed).
pub(crate) fn new_store_id(dir: &Path) -> u64 {
    static CREATED: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos());
    let mut seed = Vec::new();
    seed.extend_from_slice(&nanos.to_le_bytes());
    seed.extend_from_slice(&std::process::id().to_le_bytes());
    seed.extend_from_slice(&CREATED.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    seed.extend_from_slice(dir.as_os_str().as_encoded_bytes());
    hash64(&seed).max(1)
}

/// A directory without CURRENT may hold what a creation that was cut
/// short left (its first log, holding no write, and a manifest CURRENT
/// never named): removed, so the store is created again. Any other store
/// file there is corruption: a store whose CURRENT is gone.
fn clear_interrupted_creation(fs: &dyn Fs, dir: &Path) -> Result<()> {
    let names: Vec<String> = fs
        .list_dir(dir)?
        .into_iter()
        .filter(|name| recovery::looks_like_store_file(name))
        .collect();
    for name in &names {
        let leftover = match name.as_str() {
            "MANIFEST-000001" | "CURRENT.tmp" => true,
            "000002.log" => wal::read(fs, dir, 2, |_, _| Ok(()))
                .map(|contents| contents.is_none_or(|contents| contents.end_seq == 0))
                .unwrap_or(false),
            _ => false,
        };
        if !leftover {
            return Err(Error::corruption(
                dir.join(manifest::CURRENT),
                0,
                format!(
                    "missing, but the directory holds {name}: the store lost the file that names its manifest \
                     (run `spillway kv repair` to rebuild it)"
                ),
            ));
        }
    }
    for name in &names {
        fs.remove_file(&dir.join(name))?;
    }
    Ok(())
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

/// What the worker does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fix {
    /// The root has too many children: grow a level.
    Grow,
    /// A node has too many children.
    Divide(NodeId),
    /// An internal node is full (or, forced, holds too many lists or
    /// repeats).
    Spill(NodeId, bool),
    /// A leaf is full (or, forced, holds too many lists or repeats).
    Split(NodeId, bool),
}

/// The background thread that spills and splits.
struct Worker {
    shared: Arc<Shared>,
    manifest: ManifestWriter,
    counters: Counters,
    /// Files the tree no longer refers to, deleted once no reader holds them.
    obsolete: Vec<Arc<ListFile>>,
    /// Each node's unique ratio, with the list count and bytes it was computed for.
    unique_ratios: HashMap<NodeId, ((usize, u64), f64)>,
    /// Nodes in which a spill or rewrite met a corrupt block: left alone
    /// (no more spills or splits of them) until the store is repaired.
    damaged: HashSet<NodeId>,
    last_sync: Instant,
    /// The spill or slow split being computed beside the root spills.
    rewrite: Option<Rewrite>,
}

enum Work {
    SpillRoot(Arc<Frozen>),
    Fix(Fix),
    Install,
    Idle,
}

/// An internal spill or a slow split, computed on a thread of its own
/// against version `base` while the worker goes on spilling frozen roots:
/// a leaf rewrite at 16-byte records took 0.5-1.1 s, longer than the
/// active root took to fill, and writers stalled behind it.
struct Rewrite {
    fix: Fix,
    base: Arc<Tree>,
    started: Instant,
    thread: JoinHandle<Result<Rewritten>>,
    /// The file numbers it took: removed if it fails.
    allocated: Arc<Mutex<Vec<FileNumber>>>,
}

/// What a rewrite made: its edit of `base`, and what it read and wrote.
struct Rewritten {
    edit: Edit,
    /// How a slow split ended (`None` for a spill).
    outcome: Option<SlowSplit>,
    moved: Moved,
}

/// What a spill or split read and wrote, for the metrics.
struct Moved {
    files: usize,
    records: u64,
    read: u64,
    written: u64,
}

impl Moved {
    fn of(job: &Job<'_>) -> Moved {
        Moved {
            files: job.written.len(),
            records: job.records_in,
            read: job.bytes_read,
            written: job.bytes_written(),
        }
    }

    /// Adds this change, which started at `started`, to `metrics`.
    fn record(&self, metrics: &Metrics, started: Instant) {
        add(&metrics.list_bytes_written, self.written);
        add(&metrics.list_bytes_read, self.read);
        add(&metrics.records_spilled, self.records);
        metrics.spill_latency_us.record(started.elapsed());
    }
}

/// Tells the worker that the rewrite thread ended, however it ended.
struct RewriteEnded<'a>(&'a Shared);

impl Drop for RewriteEnded<'_> {
    fn drop(&mut self) {
        sync::lock(&self.0.control).rewrite_ended = true;
        self.0.wake.notify_all();
    }
}

impl Worker {
    fn run(mut self) -> Option<WorkerExit> {
        // Spills and splits are throughput work: a writer woken by its log's
        // sync takes a core from them at once (a synced fill of 16-byte
        // records ran 5% faster, measured).
        spillway_core::prefer_throughput();
        loop {
            // The previous version is dropped by now: its files may go.
            self.remove_obsolete();
            self.pause_if_asked();
            let tree = sync::read(&self.shared.view).tree.clone();
            // Beside a rewrite only root spills run: they append lists and
            // change nothing else, so its edit can be carried over to them.
            let rewriting = self.rewrite.is_some();
            let fix = if rewriting { None } else { self.next_fix(&tree) };
            let work = {
                let mut control = sync::lock(&self.shared.control);
                let frozen = sync::read(&self.shared.view).frozen.clone();
                match (frozen, fix) {
                    // Install what is done; on shutdown, wait for it first.
                    _ if rewriting && (control.rewrite_ended || control.shutdown) => Work::Install,
                    _ if control.shutdown => break,
                    (Some(frozen), None | Some((_, false))) => Work::SpillRoot(frozen),
                    (_, Some((fix, _))) => Work::Fix(fix),
                    (None, None) => {
                        // Nothing to do but wait for the rewrite, or idle.
                        if !rewriting {
                            control.idle_passes += 1;
                            self.shared.progress.notify_all();
                        }
                        let timeout = match self.shared.options.sync {
                            SyncMode::Periodic(interval) => interval.min(IDLE_WAKE),
                            _ => IDLE_WAKE,
                        };
                        control = sync::wait_timeout(&self.shared.wake, control, timeout).0;
                        if control.shutdown && !rewriting {
                            break;
                        }
                        Work::Idle
                    }
                }
            };
            let result = self.sync_if_due().and_then(|()| match work {
                Work::SpillRoot(frozen) => self
                    .spill_root(&tree, frozen)
                    .and_then(|()| self.prepare_spare_log()),
                Work::Fix(fix) => self.fix(&tree, fix),
                Work::Install => self.install_rewrite(&tree),
                Work::Idle => Ok(()),
            });
            if let Err(error) = result {
                // Its files are not in the tree; the next open deletes them.
                if let Some(rewrite) = self.rewrite.take() {
                    let _ = rewrite.thread.join();
                }
                self.shared.poison.poison(error);
                let mut control = sync::lock(&self.shared.control);
                control.failed = true;
                self.shared.progress.notify_all();
                return None;
            }
        }
        self.remove_obsolete();
        Some(WorkerExit {
            manifest: self.manifest,
            counters: self.counters,
        })
    }

    /// Waits, between two changes, while a caller (`verify`) asks the
    /// worker to leave the directory as it is.
    fn pause_if_asked(&self) {
        let shared = &*self.shared;
        let mut control = sync::lock(&shared.control);
        while control.pause_requests > 0 && !control.shutdown {
            control.paused = true;
            shared.progress.notify_all();
            control = sync::wait(&shared.wake, control);
        }
        control.paused = false;
    }

    /// Prepares the next log as zeros if the last one's syncs would have
    /// gained from it (wal.rs), a quarter longer than the last log grew.
    fn prepare_spare_log(&mut self) -> Result<()> {
        let shared = &*self.shared;
        if shared.options.sync == SyncMode::None {
            return Ok(());
        }
        let wanted = {
            let spare = sync::lock(&shared.spare_log);
            if spare.ready || spare.wanted == 0 {
                return Ok(());
            }
            spare.wanted
        };
        // Writers leave the file alone until it is ready.
        wal::prepare_spare(shared.fs.as_ref(), &shared.dir, wanted + wanted / 4)?;
        sync::lock(&shared.spare_log).ready = true;
        Ok(())
    }

    /// Syncs the log if the periodic interval has passed.
    fn sync_if_due(&mut self) -> Result<()> {
        let SyncMode::Periodic(interval) = self.shared.options.sync else {
            return Ok(());
        };
        if self.last_sync.elapsed() < interval {
            return Ok(());
        }
        self.last_sync = Instant::now();
        let log = sync::lock(&self.shared.current_log).clone();
        match log {
            Some(log) if !log.is_synced() => self.shared.poison.guard(|| log.sync_to(u64::MAX)),
            _ => Ok(()),
        }
    }

    /// The most urgent change the tree needs, and whether it must come
    /// before the next root spill (a node far over its capacity, or too
    /// many children: cheap to fix and needed for routing).
    fn next_fix(&mut self, tree: &Tree) -> Option<(Fix, bool)> {
        let options = &self.shared.options;
        if tree.root().children.len() > options.fan_out {
            return Some((Fix::Grow, true));
        }
        // Internal nodes first (their spills feed the leaves), then the fullest.
        let mut full: Option<(bool, u64, NodeId)> = None;
        for node in tree.nodes() {
            if node.id == ROOT {
                continue;
            }
            if node.children.len() > options.fan_out {
                return Some((Fix::Divide(node.id), true));
            }
            if self.damaged.contains(&node.id) {
                // It grows while its damage waits for repair.
                continue;
            }
            let rank = (!node.is_leaf(), node.bytes());
            if rank.1 > options.node_bytes && full.is_none_or(|(internal, bytes, _)| rank > (internal, bytes))
            {
                full = Some((rank.0, rank.1, node.id));
            }
        }
        if let Some((internal, bytes, id)) = full {
            let fix = if internal {
                Fix::Spill(id, false)
            } else {
                Fix::Split(id, false)
            };
            return Some((fix, bytes > 2 * options.node_bytes));
        }
        // Too many lists: a GET tests a filter per list, and reads a block
        // for each of their false positives.
        let crowded = tree
            .nodes()
            .filter(|node| {
                node.id != ROOT && !self.damaged.contains(&node.id) && Self::crowded(node, options)
            })
            .max_by_key(|node| (!node.is_leaf(), node.lists.len()));
        if let Some(node) = crowded {
            return Some((Self::forced_fix(node), false));
        }
        if options.unique_ratio_min > 0.0 {
            for node in tree.nodes() {
                if node.id == ROOT
                    || node.lists.len() < 2
                    || node.bytes() < options.node_bytes / 4
                    || self.damaged.contains(&node.id)
                {
                    continue;
                }
                let signature = (node.lists.len(), node.bytes());
                let ratio = match self.unique_ratios.get(&node.id) {
                    Some(&(known, ratio)) if known == signature => ratio,
                    _ => {
                        let ratio = node.unique_ratio();
                        self.unique_ratios.insert(node.id, (signature, ratio));
                        ratio
                    }
                };
                if ratio < options.unique_ratio_min {
                    return Some((Self::forced_fix(node), false));
                }
            }
        }
        None
    }

    /// Whether `node` holds more lists than a GET should test: more than
    /// `lists_max`, or more false positives than `false_positives_max`.
    fn crowded(node: &Node, options: &Options) -> bool {
        let (lists, false_positives) = node.lists_met();
        (options.lists_max > 0 && lists > options.lists_max)
            || (options.false_positives_max > 0.0
                && lists >= 2
                && false_positives > options.false_positives_max)
    }

    /// A spill (internal) or slow split (leaf) that `node` needs for
    /// another reason than its size.
    fn forced_fix(node: &Node) -> Fix {
        if node.is_leaf() {
            Fix::Split(node.id, true)
        } else {
            Fix::Spill(node.id, true)
        }
    }

    fn job(shared: &Shared, allocated: Arc<Mutex<Vec<FileNumber>>>) -> Job<'_> {
        Job {
            fs: shared.fs.as_ref(),
            dir: &shared.dir,
            options: &shared.options,
            cache: &shared.cache,
            next_file: &shared.next_file,
            store_id: shared.store_id,
            allocated,
            merge: shared.options.merge_operator.clone(),
            written: Vec::new(),
            records_in: 0,
            bytes_read: 0,
        }
    }

    fn spill_root(&mut self, tree: &Arc<Tree>, frozen: Arc<Frozen>) -> Result<()> {
        let started = Instant::now();
        let shared = self.shared.clone();
        if self.rewrite.is_some() {
            add(&shared.metrics.spills_beside_rewrites, 1);
        }
        let mut job = Self::job(&shared, Arc::default());
        let edit = spill::spill_root(&mut job, tree, frozen.root.clone(), frozen.seqs)?;
        let moved = Moved::of(&job);
        drop(job);
        self.counters.log_number = frozen.log_number;
        self.counters.log_seq = frozen.seqs.1 + 1;
        self.commit(tree, edit, moved.files > 0, true)?;
        moved.record(&shared.metrics, started);
        // Logs before the frozen root's successor hold nothing the tree lacks.
        let log_number = frozen.log_number;
        // Recycle the root unless a reader (a scan) still holds it.
        if let Some(mut root) = Arc::into_inner(frozen).and_then(|frozen| Arc::into_inner(frozen.root)) {
            root.clear();
            *sync::lock(&shared.spare_root) = Some(root);
        }
        for name in self.shared.fs.list_dir(&self.shared.dir)? {
            if wal::parse_name(&name).is_some_and(|number| number < log_number) {
                self.shared.fs.remove_file(&self.shared.dir.join(&name))?;
            }
        }
        Ok(())
    }

    /// Makes a change that moves no data at once (grow, divide, fast
    /// split); starts a rewrite for one that does.
    fn fix(&mut self, tree: &Arc<Tree>, fix: Fix) -> Result<()> {
        let started = Instant::now();
        let metrics = &self.shared.metrics;
        let next_node = self.counters.next_node;
        let edit = match fix {
            Fix::Grow => {
                add(&metrics.grows, 1);
                split::grow(tree, next_node, next_node + 1)
            }
            Fix::Divide(id) => {
                add(&metrics.divides, 1);
                split::divide(tree, id, next_node)
            }
            Fix::Split(id, false)
                if tree.node(id).fast_splits < self.shared.options.fast_splits_per_slow_split =>
            {
                match split::fast_split(tree, id, next_node) {
                    Some(edit) => {
                        add(&metrics.fast_splits, 1);
                        edit
                    }
                    None => return self.start_rewrite(tree, fix),
                }
            }
            Fix::Split(..) | Fix::Spill(..) => return self.start_rewrite(tree, fix),
        };
        self.note_new_nodes(&edit);
        self.commit(tree, edit, false, false)?;
        self.shared.metrics.spill_latency_us.record(started.elapsed());
        Ok(())
    }

    /// New nodes took the numbers from `next_node` on.
    fn note_new_nodes(&mut self, edit: &Edit) {
        let highest = edit.nodes.iter().map(|node| node.id).max().unwrap_or(0);
        self.counters.next_node = self.counters.next_node.max(highest + 1);
    }

    /// Starts `fix` (an internal spill or a slow split) on a thread of its
    /// own, against `tree`.
    fn start_rewrite(&mut self, tree: &Arc<Tree>, fix: Fix) -> Result<()> {
        debug_assert!(self.rewrite.is_none());
        let shared = self.shared.clone();
        let base = tree.clone();
        let new_id = self.counters.next_node;
        let allocated: Arc<Mutex<Vec<FileNumber>>> = Arc::default();
        let taken = allocated.clone();
        let thread = std::thread::Builder::new()
            .name("spillway-kv-rewrite".into())
            .spawn(move || {
                let _ended = RewriteEnded(&shared);
                spillway_core::prefer_throughput();
                let mut job = Self::job(&shared, taken);
                let (edit, outcome) = match fix {
                    Fix::Spill(id, _) => (spill::spill_node(&mut job, &base, id)?, None),
                    Fix::Split(id, _) => {
                        let (edit, outcome) = split::slow_split(&mut job, &base, id, new_id)?;
                        (edit, Some(outcome))
                    }
                    Fix::Grow | Fix::Divide(_) => unreachable!("grow and divide move no data"),
                };
                Ok(Rewritten {
                    edit,
                    outcome,
                    moved: Moved::of(&job),
                })
            })
            .map_err(|error| Error::io("starting the key-value store's rewrite thread", error))?;
        self.rewrite = Some(Rewrite {
            fix,
            base: tree.clone(),
            started: Instant::now(),
            thread,
            allocated,
        });
        Ok(())
    }

    /// Waits for the rewrite to end, carries its edit over to `tree` (the
    /// root spills installed meanwhile) and commits it.
    fn install_rewrite(&mut self, tree: &Arc<Tree>) -> Result<()> {
        let rewrite = self
            .rewrite
            .take()
            .expect("install_rewrite runs only with a rewrite");
        let done = rewrite
            .thread
            .join()
            .map_err(|_| Error::Internal("the key-value store's rewrite thread panicked".into()))?;
        sync::lock(&self.shared.control).rewrite_ended = false;
        let (Fix::Spill(origin, forced) | Fix::Split(origin, forced)) = rewrite.fix else {
            unreachable!("grow and divide move no data")
        };
        let done = match done {
            Ok(done) => done,
            Err(error) => {
                // Its files are in no tree: they go whatever happened.
                let allocated = std::mem::take(&mut *sync::lock(&rewrite.allocated));
                for number in allocated {
                    self.shared.cache.forget(number);
                    let _ = self
                        .shared
                        .fs
                        .remove_file(&self.shared.dir.join(list::file_name(number)));
                }
                if error.kind() != ErrorKind::Corruption {
                    return Err(error);
                }
                // A corrupt block poisons only the node that needs it: the
                // store goes on writing and serving every other read.
                self.damaged.insert(origin);
                sync::lock(&self.shared.damage).push(format!("node {origin}: {error}"));
                return Ok(());
            }
        };
        let metrics = &self.shared.metrics;
        add(
            match (forced, done.outcome) {
                (true, _) => &metrics.forced,
                (false, None) => &metrics.node_spills,
                (false, Some(SlowSplit::Split)) => &metrics.slow_splits,
                (false, Some(SlowSplit::Collapsed)) => &metrics.collapses,
            },
            1,
        );
        let edit = tree.rebase(&rewrite.base, origin, done.edit)?;
        self.note_new_nodes(&edit);
        self.commit(tree, edit, done.moved.files > 0, false)?;
        done.moved.record(&self.shared.metrics, rewrite.started);
        Ok(())
    }

    /// Makes `edit` durable in the manifest, then installs the version it
    /// makes of `tree` (dropping the frozen root if `root_spilled`).
    fn commit(&mut self, tree: &Arc<Tree>, edit: Edit, wrote_files: bool, root_spilled: bool) -> Result<()> {
        let shared = &*self.shared;
        if wrote_files {
            shared.fs.sync_dir(&shared.dir)?;
        }
        self.counters.next_file = shared.next_file.load(Ordering::Relaxed);
        let mut payload = Vec::new();
        manifest::encode_edit(&edit, self.counters, &mut payload);
        self.manifest.append(&payload)?;
        let next = Arc::new(tree.apply(&edit));
        debug_assert!(next.check_invariants().is_ok(), "{:?}", next.check_invariants());
        {
            let mut view = sync::write(&shared.view);
            view.tree = next.clone();
            if root_spilled {
                view.frozen = None;
            }
        }
        {
            let mut control = sync::lock(&shared.control);
            if root_spilled {
                control.root_spills += 1;
            }
            shared.progress.notify_all();
        }
        let live = next.files();
        for (number, file) in tree.files() {
            if !live.contains_key(&number) {
                self.obsolete.push(file);
            }
        }
        for id in &edit.removed {
            self.unique_ratios.remove(id);
        }
        if self.manifest.wants_rewrite() {
            self.rewrite_manifest(&next)?;
        }
        Ok(())
    }

    /// Starts a new manifest from a snapshot of `tree`.
    fn rewrite_manifest(&mut self, tree: &Tree) -> Result<()> {
        let shared = &*self.shared;
        let number = shared.next_file.fetch_add(1, Ordering::Relaxed);
        self.counters.next_file = number + 1;
        let merge_name = shared
            .options
            .merge_operator
            .as_ref()
            .map_or(String::new(), |merge| merge.name());
        let mut snapshot = Vec::new();
        manifest::encode_snapshot(tree, shared.store_id, self.counters, &merge_name, &mut snapshot);
        let old = self.manifest.number();
        self.manifest = ManifestWriter::create(shared.fs.as_ref(), &shared.dir, number, &snapshot)?;
        shared
            .fs
            .remove_file(&shared.dir.join(manifest::file_name(old)))?;
        add(&shared.metrics.manifest_rewrites, 1);
        Ok(())
    }

    /// Deletes the obsolete files no reader holds any more. A failure
    /// leaves the file for the next open to remove.
    fn remove_obsolete(&mut self) {
        let shared = &*self.shared;
        self.obsolete.retain(|file| {
            if Arc::strong_count(file) > 1 {
                return true;
            }
            shared.cache.forget(file.number());
            if shared.fs.remove_file(file.path()).is_ok() {
                add(&shared.metrics.files_removed, 1);
            }
            false
        });
    }
}
