#![forbid(unsafe_code)]
#![warn(missing_docs)]
//! The WB Tree (seeds 000 ch. III and VI, 001): a durable, write-optimized,
//! hash-ordered key-value store that replaces an LSM tree's compactions
//! with spills and splits, and in merge mode aggregates more keys than fit
//! in memory while staying queryable.
//!
//! ```
//! use spillway_kv::{Options, Store, WriteBatch};
//! # fn main() -> spillway_core::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! let store = Store::open(dir.path(), Options::default())?;
//! store.put(b"apple", b"3")?;
//! let mut batch = WriteBatch::new();
//! batch.put(b"pear", b"5").delete(b"apple");
//! store.write(&batch)?; // all or nothing, logged (and synced) once
//! assert_eq!(store.get(b"pear")?, Some(b"5".to_vec()));
//! assert_eq!(store.get(b"apple")?, None);
//! # Ok(())
//! # }
//! ```
//!
//! - [`Store`]: open, write (`put`, `delete`, `merge`, batches), `get`,
//!   `scan`, `flush`, `sync`, `stats`, `verify`, `close`, and
//!   [`Store::repair`] for a damaged store ([`RepairReport`]);
//! - [`Options`] and [`SyncMode`]: the tree's shape and the log's durability;
//! - [`MergeOperator`] and [`AggregateMerge`]: merge mode (the external
//!   online aggregator);
//! - [`Loader`] and [`Operation`]: bulk loads, and `spillway gen kv`'s
//!   text format of operations;
//! - [`format`](mod@format): the decoders of the files, over byte images.
//!
//! The formats, invariants, recovery, repair and costs are in the crate's
//! [DESIGN.md](../DESIGN.md).

mod batch;
mod bloom;
mod cache;
mod collapse;
pub mod format;
mod inspect;
mod kmv;
mod list;
mod load;
mod manifest;
mod merge;
mod metrics;
mod open;
mod options;
mod record;
mod recovery;
mod repair;
mod root;
mod scan;
mod shared;
mod spill;
mod split;
mod store;
mod tree;
mod wal;
mod worker;

pub use batch::WriteBatch;
pub use inspect::{ListDescription, NodeDescription, VerifyReport};
pub use load::{hex_decode, Loader, Operation};
pub use merge::{AggregateMerge, MergeOperator};
pub use metrics::KvStats;
pub use options::{Options, SyncMode};
pub use record::Kind;
pub use repair::{Loss, RepairReport, LOST_DIR};
pub use scan::Scan;
pub use store::Store;
