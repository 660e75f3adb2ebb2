//! The stream index (seed 004): records (key, timestamp, value) appended to
//! a buffer indexed by a template B+ tree, and queried by key, key range,
//! time range and range aggregates.
//!
//! This crate is being built up in steps. Here so far:
//! - [`key`]: order-preserving encodings of i64, f64, 2-D points and string
//!   prefixes into the `u64` keys the index orders by;
//! - [`BPlusTree`]: an ordinary B+ tree with splits, which grows the first
//!   template and is the baseline;
//! - [`TemplateTree`]: the template B+ tree, with overflow chains, per-leaf
//!   locks, and templates rebuilt from a sample of keys.

pub mod bptree;
mod entry;
pub mod key;
pub mod template;

pub use bptree::BPlusTree;
pub use entry::Entry;
pub use template::{OverflowStats, TemplateTree};
