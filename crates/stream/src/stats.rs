//! The counters of a stream index, and [`StreamStats`], what
//! [`StreamIndex::stats`](crate::StreamIndex::stats) reads them into.

use std::sync::atomic::AtomicU64;

use crate::template::OverflowStats;

/// Counters of a [`StreamIndex`](crate::StreamIndex); see
/// [`StreamIndex::stats`](crate::StreamIndex::stats). Serialized field by
/// field (the front ends' `stats`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
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
    /// [`StreamIndex::unaccounted`](crate::StreamIndex::unaccounted)).
    pub unaccounted_files: u64,
    /// Listed segments that could not be opened (a store opened
    /// read-only goes on without them; queries that need them fail).
    pub damaged_segments: u64,
}

/// The counters a store updates without locks, read into [`StreamStats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) writes: AtomicU64,
    pub(crate) flushes: AtomicU64,
    pub(crate) flush_pause_nanos: AtomicU64,
    pub(crate) templates: AtomicU64,
    pub(crate) compactions: AtomicU64,
    pub(crate) compacted_segments: AtomicU64,
    pub(crate) leaves_summarized: AtomicU64,
    pub(crate) leaves_read: AtomicU64,
}
