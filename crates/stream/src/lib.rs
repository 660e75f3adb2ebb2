//! The stream index (seed 004): records (key, timestamp, value) appended to
//! a buffer indexed by a template B+ tree, flushed as immutable segment
//! files, and queried by key, key range, time range and range aggregates.
//!
//! - [`StreamIndex`]: the store (write-ahead log, buffers, segments,
//!   manifest, queries, compaction);
//! - [`key`]: order-preserving encodings of i64, f64, 2-D points and string
//!   prefixes into the `u64` keys the index orders by;
//! - [`BPlusTree`]: an ordinary B+ tree with splits, which grows the first
//!   template and is the baseline;
//! - [`TemplateTree`]: the template B+ tree, with overflow chains, per-leaf
//!   locks, and templates rebuilt from a sample of keys;
//! - [`segment`]: the segment file format;
//! - tiers: resident segments merged in the background into fewer, larger
//!   runs for queries;
//! - the manifest names every file the store needs (segments and live
//!   logs); opening, a read-only open and [`StreamIndex::verify`] check
//!   them all and account for every other file before anything is
//!   deleted; [`StreamIndex::repair`] rebuilds a damaged store from what
//!   its files prove ([`RepairReport`]).
//!
//! The formats, invariants, recovery and repair are in the crate's
//! DESIGN.md.

mod batch;
pub mod bptree;
mod entry;
mod index;
pub mod key;
mod manifest;
mod merge;
mod records;
mod repair;
pub mod segment;
mod survey;
pub mod template;
mod tier;
mod wal;

pub use batch::{Batch, Op, NOT_FINITE};
pub use bptree::BPlusTree;
pub use entry::Entry;
pub use index::{Options, StreamIndex, StreamStats, TemplatePolicy, VerifyReport};
pub use records::{Aggregate, Bounds, Records, Shadow};
pub use repair::{ByteRange, LostFile, RepairReport, LOST_DIR};
pub use survey::Unaccounted;
pub use template::{OverflowStats, TemplateTree};
