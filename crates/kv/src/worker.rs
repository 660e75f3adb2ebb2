//! The background worker: spills frozen roots into the tree, spills full
//! internal nodes, splits full leaves, divides nodes with too many children
//! and grows the tree, each change made durable in the manifest before the
//! new version is installed. A long rewrite (internal spill, slow split)
//! runs on a thread of its own beside the root spills (see `shared.rs` for
//! the concurrency of the whole store).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use spillway_core::sync;
use spillway_core::{Error, ErrorKind, Result};

use crate::list::{self, FileNumber, ListFile};
use crate::manifest::{self, Counters, ManifestWriter};
use crate::metrics::{add, Metrics};
use crate::options::{Options, SyncMode};
use crate::shared::{Frozen, Shared, WorkerExit, WorkerHandle};
use crate::spill::{self, Job};
use crate::split::{self, SlowSplit};
use crate::tree::{Edit, Node, NodeId, Tree, ROOT};
use crate::wal;

/// How long the idle worker sleeps before it looks for files to delete.
const IDLE_WAKE: Duration = Duration::from_millis(200);

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
pub(crate) struct Worker {
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

/// Starts the worker of a store opened for writing; it runs until the
/// store closes or a change fails (which poisons the store).
pub(crate) fn start(
    shared: Arc<Shared>,
    manifest: ManifestWriter,
    counters: Counters,
) -> Result<WorkerHandle> {
    let worker = Worker {
        shared,
        manifest,
        counters,
        obsolete: Vec::new(),
        unique_ratios: HashMap::new(),
        damaged: HashSet::new(),
        last_sync: Instant::now(),
        rewrite: None,
    };
    std::thread::Builder::new()
        .name("spillway-kv".into())
        .spawn(move || worker.run())
        .map_err(|error| Error::io("starting the key-value store's worker thread", error))
}
