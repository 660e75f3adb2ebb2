//! The WB Tree (seeds 000 ch. III and VI, 001): a durable, write-optimized,
//! hash-ordered key-value store that replaces an LSM tree's compactions
//! with spills and splits, and in merge mode aggregates more keys than fit
//! in memory while staying queryable.
//!
//! The formats, invariants, recovery and costs are in the crate's DESIGN.md.

mod batch;
mod bloom;
mod cache;
mod collapse;
pub mod format;
mod kmv;
mod list;
mod manifest;
mod merge;
mod options;
mod record;
mod root;
mod scan;
mod spill;
mod split;
mod store;
mod tree;
mod verify;
mod wal;

pub use batch::WriteBatch;
pub use merge::{AggregateMerge, MergeOperator};
pub use options::{Options, SyncMode};
pub use record::Kind;
pub use scan::Scan;
pub use store::{KvStats, Store};
pub use verify::VerifyReport;
