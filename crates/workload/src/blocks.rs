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
//! Each channel holds at most [`BLOCKS_IN_FLIGHT_PER_WORKER`] blocks, which
//! bounds memory and makes a slow writer stall the workers (back-pressure).
//! When the caller stops (target reached or error) it drops the receivers; a
//! worker's next send fails and the worker exits.

use std::sync::mpsc;

use spillway_core::{Error, Result};

/// Finished blocks a worker may have queued before it waits for the writer.
pub(crate) const BLOCKS_IN_FLIGHT_PER_WORKER: usize = 2;

/// Builds blocks `0..block_count` with `make` on `threads` threads and passes
/// them in order to `consume`, which returns `Ok(false)` to stop early.
pub(crate) fn for_each_block<B, M, C>(threads: usize, block_count: u64, make: M, mut consume: C) -> Result<()>
where
    B: Send,
    M: Fn(u64) -> B + Sync,
    C: FnMut(u64, B) -> Result<bool>,
{
    let threads = threads.max(1);
    if threads == 1 {
        for index in 0..block_count {
            if !consume(index, make(index))? {
                break;
            }
        }
        return Ok(());
    }
    std::thread::scope(|scope| {
        let make = &make;
        let receivers: Vec<mpsc::Receiver<B>> = (0..threads)
            .map(|worker| {
                let (sender, receiver) = mpsc::sync_channel(BLOCKS_IN_FLIGHT_PER_WORKER);
                scope.spawn(move || {
                    for index in (worker as u64..block_count).step_by(threads) {
                        if sender.send(make(index)).is_err() {
                            break; // The consumer stopped.
                        }
                    }
                });
                receiver
            })
            .collect();
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
}
