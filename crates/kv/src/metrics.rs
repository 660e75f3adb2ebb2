//! The store's statistics: the counters and latency histograms its writes,
//! reads and worker update without locks, and the [`KvStats`] they are read
//! into.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use spillway_core::{Histogram, HistogramSnapshot};

/// Counters and histograms, updated without locks.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    pub(crate) puts: AtomicU64,
    pub(crate) deletes: AtomicU64,
    pub(crate) merges: AtomicU64,
    pub(crate) write_batches: AtomicU64,
    pub(crate) user_bytes: AtomicU64,
    pub(crate) wal_bytes: AtomicU64,
    pub(crate) gets: AtomicU64,
    pub(crate) get_hits: AtomicU64,
    pub(crate) get_block_reads: AtomicU64,
    pub(crate) get_filter_passes: AtomicU64,
    pub(crate) node_spills: AtomicU64,
    pub(crate) slow_splits: AtomicU64,
    pub(crate) collapses: AtomicU64,
    pub(crate) fast_splits: AtomicU64,
    pub(crate) divides: AtomicU64,
    pub(crate) grows: AtomicU64,
    pub(crate) forced: AtomicU64,
    pub(crate) spills_beside_rewrites: AtomicU64,
    pub(crate) list_bytes_written: AtomicU64,
    pub(crate) list_bytes_read: AtomicU64,
    pub(crate) records_spilled: AtomicU64,
    pub(crate) manifest_rewrites: AtomicU64,
    pub(crate) logs_over_spares: AtomicU64,
    pub(crate) files_removed: AtomicU64,
    pub(crate) stalls: AtomicU64,
    pub(crate) stall_us: AtomicU64,
    pub(crate) write_latency_us: Histogram,
    pub(crate) get_latency_us: Histogram,
    pub(crate) spill_latency_us: Histogram,
}

pub(crate) fn add(counter: &AtomicU64, amount: u64) {
    counter.fetch_add(amount, Ordering::Relaxed);
}

pub(crate) fn get(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// A store's statistics at one moment; serialized as they are, they are
/// the JSON of `spillway kv stats --json` and of Python's `KV.stats()`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
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
    /// Bytes of memory the indexes take per list record.
    pub index_bytes_per_record: f64,
    /// Bytes of list files written by spills and splits.
    pub list_bytes_written: u64,
    /// Bytes of list blocks read by spills and splits.
    pub list_bytes_read: u64,
    /// Records read by spills and splits.
    pub records_spilled: u64,
    /// Bytes written to logs and lists over bytes of keys and values
    /// written.
    pub write_amplification: f64,
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
