//! Ordered parallel generation of independent blocks.
//!
//! The byte-heavy generators (text, R-MAT) cut their output into blocks whose
//! content depends only on the block index (each block draws from
//! [`Rng::stream`](crate::Rng::stream)`(seed, index)`). Worker threads build
//! blocks and the calling thread consumes them strictly in index order, so the
//! output is identical for any thread count.
//!
//! # Algorithm
//! ```text
//!   worker 0: blocks 0, T, 2T, ...  ──channel 0 (bounded)──┐
//!   worker 1: blocks 1, T+1, ...    ──channel 1 (bounded)──┼──> caller: block b from channel b mod T
//!   worker T-1: ...                 ──channel T-1────────────┘
//! ```
//! `T` is [`worker_count`]: the requested threads (0 = every core, the
//! convention of [`spillway_core::worker_threads`]), at most the number of
//! blocks and at most [`THREADS_MAX`]. Each channel holds at most
//! [`BLOCKS_IN_FLIGHT_PER_WORKER`] blocks, which bounds memory and makes a
//! slow writer stall the workers (back-pressure). When the caller stops
//! (target reached or error) it drops the receivers; a worker's next send
//! fails and the worker exits. A worker the operating system refuses to start
//! is an error (`ResourcesExhausted`), not a panic: the workers already
//! started see their receivers dropped and exit.

use std::sync::mpsc;
use std::thread;

use spillway_core::{Error, Result};

/// Finished blocks a worker may have queued before it waits for the writer.
pub(crate) const BLOCKS_IN_FLIGHT_PER_WORKER: usize = 2;

/// The most worker threads a generator starts, whatever it is asked for: a
/// thread per block already keeps every core of a large machine busy, and
/// each worker holds up to `1 + BLOCKS_IN_FLIGHT_PER_WORKER` blocks (about
/// 3 MiB) in memory.
pub const THREADS_MAX: usize = 256;

/// The worker threads that build `block_count` blocks for a request of
/// `requested` threads: `requested` (every core the process may use when 0),
/// capped at the number of blocks and at [`THREADS_MAX`]; at least 1. With 1
/// the calling thread builds the blocks itself.
pub fn worker_count(requested: usize, block_count: u64) -> usize {
    let blocks = usize::try_from(block_count).unwrap_or(usize::MAX);
    spillway_core::worker_threads(requested)
        .min(THREADS_MAX)
        .min(blocks)
        .max(1)
}

/// Builds blocks `0..block_count` with `make` on [`worker_count`]`(threads,
/// block_count)` threads and passes them in order to `consume`, which returns
/// `Ok(false)` to stop early.
pub(crate) fn for_each_block<B, M, C>(threads: usize, block_count: u64, make: M, consume: C) -> Result<()>
where
    B: Send,
    M: Fn(u64) -> B + Sync,
    C: FnMut(u64, B) -> Result<bool>,
{
    for_each_block_on(None, threads, block_count, make, consume)
}

/// [`for_each_block`] with workers of `stack_bytes` of stack (the platform's
/// default when `None`); tests use an impossible size to see a refused spawn.
fn for_each_block_on<B, M, C>(
    stack_bytes: Option<usize>,
    threads: usize,
    block_count: u64,
    make: M,
    mut consume: C,
) -> Result<()>
where
    B: Send,
    M: Fn(u64) -> B + Sync,
    C: FnMut(u64, B) -> Result<bool>,
{
    let threads = worker_count(threads, block_count);
    if threads == 1 {
        for index in 0..block_count {
            if !consume(index, make(index))? {
                break;
            }
        }
        return Ok(());
    }
    thread::scope(|scope| {
        let make = &make;
        let receivers = (0..threads)
            .map(|worker| {
                let (sender, receiver) = mpsc::sync_channel(BLOCKS_IN_FLIGHT_PER_WORKER);
                let mut builder = thread::Builder::new().name(format!("spillway-gen-{worker}"));
                if let Some(stack_bytes) = stack_bytes {
                    builder = builder.stack_size(stack_bytes);
                }
                builder
                    .spawn_scoped(scope, move || {
                        for index in (worker as u64..block_count).step_by(threads) {
                            if sender.send(make(index)).is_err() {
                                break; // The consumer stopped.
                            }
                        }
                    })
                    .map_err(|error| {
                        Error::ResourcesExhausted(format!(
                            "could not start generator worker thread {} of {threads}: {error}",
                            worker + 1
                        ))
                    })?;
                Ok(receiver)
            })
            // On an error, collecting drops the receivers made so far, which
            // stops their workers; the scope then waits for them.
            .collect::<Result<Vec<mpsc::Receiver<B>>>>()?;
        for index in 0..block_count {
            let block = receivers[(index % threads as u64) as usize]
                .recv()
                .map_err(|_| Error::Internal(format!("the worker building block {index} died")))?;
            if !consume(index, block)? {
                break;
            }
        }
        // Returning drops the receivers, which stops the workers.
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivers_blocks_in_order_for_any_thread_count() {
        for threads in [1, 2, 3, 8] {
            let mut seen = Vec::new();
            for_each_block(
                threads,
                20,
                |index| index * 10,
                |index, block| {
                    assert_eq!(block, index * 10);
                    seen.push(block);
                    Ok(true)
                },
            )
            .unwrap();
            assert_eq!(seen, (0..20).map(|index| index * 10).collect::<Vec<_>>());
        }
    }

    #[test]
    fn stops_early_and_propagates_errors() {
        for threads in [1, 4] {
            let mut count = 0;
            for_each_block(
                threads,
                u64::MAX,
                |index| index,
                |index, _| {
                    count += 1;
                    Ok(index < 5)
                },
            )
            .unwrap();
            assert_eq!(count, 6);
            let error = for_each_block(
                threads,
                u64::MAX,
                |index| index,
                |_, _| Err(Error::InvalidArgument("stop".into())),
            )
            .unwrap_err();
            assert!(error.to_string().contains("stop"));
        }
    }

    #[test]
    fn worker_count_is_capped_by_blocks_and_threads_max_and_zero_means_every_core() {
        let cores = spillway_core::worker_threads(0);
        assert_eq!(worker_count(0, u64::MAX), cores.min(THREADS_MAX));
        assert_eq!(worker_count(0, 1), 1);
        assert_eq!(worker_count(3, 1000), 3);
        assert_eq!(worker_count(1_000_000, 10), 10);
        assert_eq!(worker_count(1_000_000, u64::MAX), THREADS_MAX);
        assert_eq!(worker_count(usize::MAX, 0), 1);
    }

    /// Block indices each built, and whether any was built on the calling
    /// thread.
    fn build_and_record(threads: usize, block_count: u64) -> (Vec<u64>, bool) {
        let caller = thread::current().id();
        let on_caller = std::sync::atomic::AtomicBool::new(false);
        let mut seen = Vec::new();
        for_each_block(
            threads,
            block_count,
            |index| {
                if thread::current().id() == caller {
                    on_caller.store(true, std::sync::atomic::Ordering::Relaxed);
                }
                index
            },
            |_, block| {
                seen.push(block);
                Ok(true)
            },
        )
        .unwrap();
        (seen, on_caller.into_inner())
    }

    #[test]
    fn absurd_thread_requests_are_capped_instead_of_spawned() {
        // Before the cap, this tried to start usize::MAX threads (a capacity
        // overflow panic; a million took 25 s).
        let started = std::time::Instant::now();
        for threads in [usize::MAX, 1_000_000] {
            let (seen, _) = build_and_record(threads, 10);
            assert_eq!(seen, (0..10).collect::<Vec<_>>());
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn zero_threads_means_every_core() {
        let (seen, on_caller) = build_and_record(0, 64);
        assert_eq!(seen, (0..64).collect::<Vec<_>>());
        // With several cores the blocks are built by workers; with one, by
        // the calling thread (0 used to mean "the calling thread" always).
        assert_eq!(on_caller, spillway_core::worker_threads(0) == 1);
        let (_, on_caller) = build_and_record(1, 64);
        assert!(on_caller);
    }

    #[cfg(target_pointer_width = "64")]
    #[test]
    fn a_refused_worker_thread_is_an_error_not_a_panic() {
        // No system maps a 1 PiB stack, so every spawn is refused.
        let error = for_each_block_on(Some(1 << 50), 4, 100, |index| index, |_, _| Ok(true)).unwrap_err();
        assert_eq!(error.kind(), spillway_core::ErrorKind::ResourcesExhausted);
        assert!(
            error
                .to_string()
                .contains("could not start generator worker thread 1 of 4"),
            "{error}"
        );
    }
}
