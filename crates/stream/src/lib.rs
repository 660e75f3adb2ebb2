#![forbid(unsafe_code)]
#![warn(missing_docs)]
//! The stream index (seed 004): records (key, timestamp, value) appended to
//! a buffer indexed by a template B+ tree, flushed as immutable segment
//! files, and queried by key, key range, time range and range aggregates.
//!
//! ```
//! use spillway_stream::{Bounds, Options, StreamIndex};
//! # fn main() -> spillway_core::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! let index = StreamIndex::open(dir.path(), Options::default())?;
//! index.append(7, 1_000, b"12")?;
//! index.append(7, 2_000, b"30")?;
//! index.append(9, 1_500, b"5")?;
//! let key_7 = index.get(7)?;
//! assert_eq!(key_7.len(), 2);
//! assert_eq!(key_7.value(1), b"30");
//! let early = index.range(Bounds::keys(0, u64::MAX).times(0, 1_500))?;
//! assert_eq!(early.len(), 2);
//! # Ok(())
//! # }
//! ```
//!
//! - [`StreamIndex`]: the store (write-ahead log, buffers, segments,
//!   manifest, queries, compaction), opened with [`Options`];
//! - [`Batch`]: appends, updates and deletes written all or nothing;
//!   [`Bounds`], [`Records`] and [`Aggregate`]: what queries take and give;
//! - [`ingest`]: records from a CSV file or a generator written in
//!   batches, a refused record named by its line;
//! - [`key`]: order-preserving encodings of i64, f64, 2-D points and string
//!   prefixes into the `u64` keys the index orders by;
//! - [`BPlusTree`]: an ordinary B+ tree with splits, which grows the first
//!   template and is the baseline;
//! - [`TemplateTree`]: the template B+ tree, with overflow chains, per-leaf
//!   locks, and templates rebuilt from a sample of keys;
//! - tiers: resident segments merged in the background into fewer, larger
//!   runs for queries;
//! - the manifest names every file the store needs (segments and live
//!   logs); opening, a read-only open and [`StreamIndex::verify`] check
//!   them all and account for every other file before anything is
//!   deleted; [`StreamIndex::repair`] rebuilds a damaged store from what
//!   its files prove ([`RepairReport`]);
//! - [`format`](mod@format): the decoders of the files, over byte images.
//!
//! The formats, invariants, recovery and repair are in the crate's
//! [DESIGN.md](../DESIGN.md).

mod batch;
mod bptree;
mod buffer;
mod cache;
mod entry;
mod flusher;
pub mod format;
mod index;
pub mod ingest;
pub mod key;
mod manifest;
mod merge;
mod open;
mod options;
mod query;
mod records;
mod repair;
mod segment;
mod shared;
mod stats;
mod survey;
mod template;
mod tier;
mod wal;
mod write;

pub use batch::{Batch, Op, NOT_FINITE};
pub use bptree::BPlusTree;
pub use entry::Entry;
pub use index::{StreamIndex, VerifyReport};
pub use ingest::IngestBatch;
pub use options::{Options, TemplatePolicy, REBUILD_THRESHOLD_DEFAULT};
pub use records::{Aggregate, Bounds, Records, Shadow};
pub use repair::{ByteRange, LostFile, RepairReport, LOST_DIR};
pub use segment::{Extent, LeafSummary, SegmentMeta};
pub use stats::StreamStats;
pub use survey::Unaccounted;
pub use template::{OverflowStats, TemplateTree};
