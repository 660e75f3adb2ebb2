#![forbid(unsafe_code)]
#![warn(missing_docs)]
//! The staged pipeline runtime of TritonSort and Themis (seed 003).
//!
//! A **phase** is a graph of **stages** joined by bounded **queues**; each
//! stage runs a fixed number of **worker** threads; **work units** flow
//! through the queues. Memory is an explicit resource: byte
//! [`MemoryQuota`]s and [`BufferPool`]s of preallocated buffers. A per-node
//! [`DiskScheduler`] hands out write tokens so writes stay large and, with
//! several disks, no disk is read and written at once. Every stage reports
//! bytes in and out, busy time and time blocked on input, output and
//! memory, which is how the bottleneck is found ([`PhaseReport::table`],
//! after seed 003 Table 4.1). A monitor thread fails a phase whose workers
//! are all blocked with nothing changing hands (a deadlock) and says what
//! each one waits for.
//!
//! ```
//! use spillway_pipeline::{PhaseBuilder, StageSpec};
//!
//! # fn main() -> spillway_core::Result<()> {
//! let mut phase = PhaseBuilder::new("squares");
//! let (numbers_out, numbers_in) = phase.queue::<Vec<u8>>("numbers", 4);
//! let (squares_out, squares_in) = phase.queue::<Vec<u8>>("squares", 4);
//!
//! // Two generators: worker i sends i, i + 2, i + 4, ... below 100.
//! phase.stage(StageSpec::new("generate", 2).writes(&numbers_out), move |worker| {
//!     for n in (worker.index()..100).step_by(worker.workers()) {
//!         worker.send(&numbers_out, vec![n as u8])?;
//!     }
//!     Ok(())
//! });
//! // Three squarers read until the generators have all returned.
//! phase.stage(StageSpec::new("square", 3).reads(&numbers_in).writes(&squares_out), move |worker| {
//!     while let Some(unit) = worker.recv(&numbers_in)? {
//!         let n = u32::from(unit[0]);
//!         worker.send(&squares_out, (n * n).to_le_bytes().to_vec())?;
//!     }
//!     Ok(())
//! });
//! let total = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
//! let sum = total.clone();
//! phase.stage(StageSpec::new("sum", 1).reads(&squares_in), move |worker| {
//!     while let Some(unit) = worker.recv(&squares_in)? {
//!         let square = u32::from_le_bytes(unit[..4].try_into().unwrap());
//!         sum.fetch_add(u64::from(square), std::sync::atomic::Ordering::Relaxed);
//!     }
//!     Ok(())
//! });
//!
//! let phase = phase.build()?;
//! println!("{}", phase.describe());
//! let report = phase.run()?;
//! println!("{report}");
//! assert_eq!(total.load(std::sync::atomic::Ordering::Relaxed), (0..100u64).map(|n| n * n).sum::<u64>());
//! assert_eq!(report.stage("square").unwrap().units_in, 100);
//! # Ok(())
//! # }
//! ```
//!
//! The threading, closing, cancellation and deadlock models, the disk
//! scheduler's rules, the metric definitions and the invariants are in the
//! crate's [DESIGN.md](../DESIGN.md).

mod context;
mod disk;
mod graph;
mod memory;
mod phase;
mod queue;
mod report;
mod unit;
mod wait;
mod worker;

pub use disk::{DiskScheduler, ReadToken, WriteToken};
pub use graph::{PhaseBuilder, StageSpec};
pub use memory::{Allocation, BufferPool, MemoryQuota, PooledBuffer};
pub use phase::{Phase, DEADLOCK_TIMEOUT_DEFAULT};
pub use queue::{Consumer, Producer};
pub use report::{PhaseReport, QueueReport, StageReport, BYTES_PER_MB};
pub use unit::WorkUnit;
pub use worker::Worker;
