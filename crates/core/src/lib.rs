#![warn(missing_docs)]
//! Foundations shared by every Spillway engine.
//!
//! - [`error`]: the error type, its kinds, `bail!`/`ensure!` and the sticky
//!   [`Poison`] of a store whose durable write failed.
//! - [`fs`]: the Fs seam every engine does its file I/O through: the real
//!   file system and `SimFs`, a simulated one that crashes and fails on demand.
//! - [`checksum`]: CRC32C that mixes in the file number and offset.
//! - [`hash`]: XXH3-64 with a fixed seed, the only hash Spillway persists.
//! - [`varint`]: LEB128 and zig-zag integers.
//! - [`decimal`]: unsigned integers as decimal text, without `format!`.
//! - [`codec`]: block compression (none, LZ4, Snappy, zstd).
//! - [`memory`]: huge-page hints for large data buffers.
//! - [`range`]: range partitioning from a sample of the keys.
//! - [`gensort`]: the sort benchmark's 100-byte record.
//! - [`limits`]: the bounds every decoder checks before it allocates.
//! - [`log`]: logs of checksummed frames (write-ahead logs, manifests), with
//!   group commit and torn-tail detection.
//! - [`histogram`]: latency histograms with bounded percentile error.
//! - [`threads`]: the worker-thread count convention (0 = every core).
//! - [`sync`]: taking a lock whose holder panicked.
//! - [`io_accounting`]: this process's bytes read and written, from `/proc/self/io`.
//! - [`interrupt`]: stopping long work on Ctrl-C, SIGTERM or a caller's request.
//! - [`scratch`]: temporary files that name their owner, swept when it is gone.
//! - [`seconds`]: durations in reports, written as seconds.
//!
//! ```
//! use std::path::Path;
//! use spillway_core::{ensure, Fs, Result, SimFs};
//! # fn main() -> Result<()> {
//! // Engines do their I/O through the Fs seam; tests run them on SimFs.
//! let fs = SimFs::new();
//! fs.create_dir_all(Path::new("/store"))?;
//! let file = fs.create(Path::new("/store/000001.log"))?;
//! file.write_at(b"frame", 0)?;
//! file.sync_data()?;
//! ensure!(file.len()? == 5, Internal, "a write of 5 bytes left {} bytes", file.len()?);
//! # Ok(())
//! # }
//! ```
//!
//! The file formats, invariants and the assumptions made about the disk are in
//! the crate's [DESIGN.md](../DESIGN.md).

pub mod checksum;
pub mod codec;
pub mod decimal;
pub mod error;
pub mod fs;
pub mod gensort;
pub mod hash;
pub mod histogram;
pub mod interrupt;
pub mod io_accounting;
pub mod limits;
pub mod log;
pub mod memory;
pub mod range;
pub mod scratch;
pub mod seconds;
pub mod sync;
pub mod threads;
pub mod varint;

pub use checksum::{block_crc, crc32c, verify_block, BlockChecksum};
pub use codec::Codec;
pub use error::{Error, ErrorKind, IoContext, Poison, Result};
pub use fs::{DirectoryLock, Fs, FsFile, OpenOptions, RealFs, SimFs};
pub use hash::{hash64, Hash64};
pub use histogram::{Histogram, HistogramSnapshot, Timer};
pub use interrupt::Interrupt;
pub use io_accounting::IoCounters;
pub use limits::Limits;
pub use threads::{check_threads, prefer_throughput, worker_threads, THREADS_MAX};
pub use varint::DecodeError;
