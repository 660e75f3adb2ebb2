//! The state the store's API (`store.rs`) and its background worker
//! (`worker.rs`) share, and the locks that guard it.
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

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;

use spillway_core::log::LogSync;
use spillway_core::{Fs, Poison};

use crate::cache::FileCache;
use crate::manifest::{Counters, ManifestWriter};
use crate::metrics::Metrics;
use crate::options::Options;
use crate::root::RootBuffer;
use crate::tree::Tree;
use crate::wal::Wal;

/// The worker thread; it hands back the manifest when it stops cleanly.
pub(crate) type WorkerHandle = JoinHandle<Option<WorkerExit>>;

/// What the worker hands back when it stops without a failure.
#[derive(Debug)]
pub(crate) struct WorkerExit {
    pub(crate) manifest: ManifestWriter,
    pub(crate) counters: Counters,
}

/// A root buffer being spilled.
#[derive(Debug)]
pub(crate) struct Frozen {
    pub(crate) root: Arc<RootBuffer>,
    /// The log started when it froze: logs below it hold only its records
    /// (and older ones already in the tree).
    pub(crate) log_number: u64,
    /// The sequence numbers of the writes it holds, first and last: its
    /// lists record them (list/).
    pub(crate) seqs: (u64, u64),
}

/// What readers see besides the active root.
#[derive(Debug, Clone)]
pub(crate) struct View {
    pub(crate) frozen: Option<Arc<Frozen>>,
    pub(crate) tree: Arc<Tree>,
}

#[derive(Debug)]
pub(crate) struct Writer {
    /// `None` for a read-only store and once closed.
    pub(crate) wal: Option<Wal>,
    pub(crate) next_seq: u64,
    /// The sequence number of the first write the active root may hold.
    pub(crate) root_seq_first: u64,
}

/// The next log, prepared ahead of the freeze that needs it (wal.rs).
#[derive(Debug, Default)]
pub(crate) struct SpareLog {
    /// [`wal::SPARE_NAME`] is written and synced, and no one writes it.
    pub(crate) ready: bool,
    /// Bytes the last frozen root's log held: the size of the next spare.
    pub(crate) wanted: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Control {
    pub(crate) shutdown: bool,
    /// The worker stopped on an error (the store is poisoned).
    pub(crate) failed: bool,
    /// Root spills completed.
    pub(crate) root_spills: u64,
    /// Times the worker found nothing to do (after removing obsolete files).
    pub(crate) idle_passes: u64,
    /// The rewrite thread has ended (its result waits to be installed).
    pub(crate) rewrite_ended: bool,
    /// Callers (`verify`) that want the worker to stop between changes.
    pub(crate) pause_requests: u32,
    /// The worker is stopped between changes for them.
    pub(crate) paused: bool,
}

#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) fs: Arc<dyn Fs>,
    pub(crate) dir: PathBuf,
    pub(crate) options: Options,
    /// The store's identity, in its manifest, logs and list files.
    pub(crate) store_id: u64,
    /// The merge operator's name ("" for none), in every log header.
    pub(crate) merge_name: String,
    pub(crate) read_only: bool,
    /// What background work found damaged (a corrupt block met by a
    /// spill or a rewrite): the node and the error, one entry each.
    pub(crate) damage: Mutex<Vec<String>>,
    pub(crate) closed: AtomicBool,
    pub(crate) poison: Poison,
    pub(crate) cache: Arc<FileCache>,
    pub(crate) next_file: AtomicU64,
    pub(crate) writer: Mutex<Writer>,
    /// The log being written, for the worker's periodic sync.
    pub(crate) current_log: Mutex<Option<Arc<LogSync>>>,
    /// A spilled root, emptied, to be the next active one.
    pub(crate) spare_root: Mutex<Option<RootBuffer>>,
    /// The spare log the worker prepares for the next freeze.
    pub(crate) spare_log: Mutex<SpareLog>,
    pub(crate) active: RwLock<RootBuffer>,
    pub(crate) view: RwLock<View>,
    pub(crate) control: Mutex<Control>,
    /// Wakes the worker: a root froze, or the store closes.
    pub(crate) wake: Condvar,
    /// Wakes writers and flushes: a root spilled, or the worker failed.
    pub(crate) progress: Condvar,
    pub(crate) metrics: Metrics,
}
