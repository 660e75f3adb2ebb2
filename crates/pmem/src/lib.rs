//! Persistent-memory indexes (seed 002, chapter IV) and what they stand on.
//!
//! There is no persistent memory on most machines: a region is a mapped
//! file, and the cache-line flushes run for real, so flushes and fences per
//! operation (counted by every [`persist`] mode) are the figure to compare.
//!
//! - [`b3page`]: a B3-tree page: a binary search tree of nodes in a block,
//!   an insert one node and one 8-byte link.
//! - [`b3tree`]: the B3-tree over those pages: B-link splits, merges,
//!   lock-free readers, recovery.
//! - [`region`]: a mapped file (or heap memory) addressed by offsets, with a
//!   checksummed header and a failure-atomic root word.
//! - [`bench`]: a PiBench-style run (insert, search, negative search,
//!   delete) with flushes and fences per operation.
//! - [`cceh`]: CCEH, cacheline-conscious extendible hashing, u64 to u64.
//! - [`epoch`]: safe reclamation of blocks lock-free searches may still
//!   read.
//! - [`crash`]: crash-state enumeration: the post-crash images a trace
//!   allows under the x86 persistency model, each checked by the caller.
//! - [`crashtest`]: CCEH's crash test: a traced run, every crash image
//!   recovered and checked against the oracle.
//! - [`heap`]: the region's allocator: power-of-two blocks, a block map,
//!   free lists per class, and a recovery that reclaims every leak.
//! - [`latch`]: per-segment latches (with versions, for lock-free
//!   searches) and live counts, in DRAM.
//! - [`pagelatch`]: per-page writer latches (holding a B3-tree page's node
//!   slots) and versions, for lock-free readers, in DRAM.
//! - [`persist`]: the one persistence primitive, [`Persist`], and its modes
//!   (hardware flushes chosen by CPUID, fence only, none, added latency,
//!   tracing for the crash tester).
//! - [`record`]: a byte-string key and value out of line, checksummed
//!   (the byte-keyed indexes').
//! - [`table`]: a CCEH table in a persistence mode chosen by name.
//! - [`tree`]: the `Sorted` interface of both trees, and a tree of either
//!   kind in a persistence mode chosen by name.
//! - [`treeroot`]: what both trees stand on: shape, statistics, root
//!   object.
//! - [`fastfair`]: the sorted-leaf baseline the B3-tree is measured
//!   against (FAST&FAIR's manner).
//!
//! `DESIGN.md` beside this crate has the formats, the persistency model and
//! what is still to come.

pub mod b3page;
pub mod b3tree;
pub mod bench;
pub mod cceh;
pub mod crash;
pub mod crashtest;
pub mod epoch;
pub mod fastfair;
pub mod heap;
pub mod latch;
pub mod pagelatch;
pub mod persist;
pub mod record;
pub mod region;
pub mod table;
pub mod tree;
pub mod treeroot;

pub use cceh::Cceh;
pub use heap::Heap;
pub use persist::{Counts, Event, FenceOnly, FlushKind, Hardware, Latency, Persist, Tracing, Volatile, LINE};
pub use region::Region;
pub use table::{Mode, Table, TableStats};
pub use tree::Tree;
