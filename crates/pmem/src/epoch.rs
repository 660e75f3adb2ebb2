//! Safe reclamation of blocks that lock-free readers may still be reading:
//! a block unlinked from the structure (an old directory, a segment merged
//! away) is *retired*, and freed only once every reader that could have
//! reached it has finished.
//!
//! Epochs, with two reader counts per stripe: a reader registers in the
//! count of the current epoch's parity (and checks the epoch did not move
//! meanwhile), and leaves when done. The epoch moves from `e` to `e + 1`
//! only when no reader of epoch `e - 1` remains (the other parity's counts
//! are all zero), so a block retired at epoch `r` is unreachable by any
//! reader once the epoch reaches `r + 2`. Threads are spread over stripes,
//! each count on its own cache line, so two threads' searches do not write
//! one line. With no reader about (one thread), a retired block is freed
//! at the next reclaim, deterministically, as the crash tester needs.
//!
//! All of this is in DRAM: after a crash, a retired block is unreachable
//! and the allocator's recovery reclaims it.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::Mutex;

/// Stripes of threads for counts many threads bump: a thread's own stripe
/// is [`stripe`].
pub(crate) const STRIPES: usize = 8;

#[derive(Debug, Default)]
#[repr(align(64))]
struct Stripe([AtomicU64; 2]);

/// The epochs of one structure, and its retired blocks.
#[derive(Debug, Default)]
pub struct Epochs {
    epoch: AtomicU64,
    stripes: [Stripe; STRIPES],
    /// Retired blocks, each with the epoch it was retired at.
    retired: Mutex<Vec<(u64, u64)>>,
}

/// A reader's registration: blocks it can reach stay allocated until it is
/// dropped.
#[derive(Debug)]
pub struct Pin<'a> {
    count: &'a AtomicU64,
}

impl Drop for Pin<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, SeqCst);
    }
}

/// This thread's stripe (threads are dealt out in turn).
pub(crate) fn stripe() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static MINE: usize = NEXT.fetch_add(1, SeqCst) % STRIPES;
    }
    MINE.with(|&stripe| stripe)
}

impl Epochs {
    /// Registers a reader for as long as the pin lives.
    pub fn pin(&self) -> Pin<'_> {
        let stripe = &self.stripes[stripe()];
        loop {
            let epoch = self.epoch.load(SeqCst);
            let count = &stripe.0[(epoch & 1) as usize];
            count.fetch_add(1, SeqCst);
            if self.epoch.load(SeqCst) == epoch {
                return Pin { count };
            }
            count.fetch_sub(1, SeqCst);
        }
    }

    /// Retires `block`, already unlinked: it is freed by a later
    /// [`reclaim`](Self::reclaim).
    pub fn retire(&self, block: u64) {
        let epoch = self.epoch.load(SeqCst);
        self.lock().push((epoch, block));
    }

    /// Moves the epoch on as far as readers allow (at most twice) and
    /// hands `free` every retired block no reader can reach any more.
    pub fn reclaim(&self, mut free: impl FnMut(u64)) {
        let mut retired = self.lock();
        if retired.is_empty() {
            return;
        }
        for _ in 0..2 {
            let epoch = self.epoch.load(SeqCst);
            let older = ((epoch + 1) & 1) as usize;
            if self
                .stripes
                .iter()
                .any(|stripe| stripe.0[older].load(SeqCst) != 0)
            {
                break;
            }
            // Only reclaimers (holding the list's lock) move the epoch.
            self.epoch.store(epoch + 1, SeqCst);
        }
        let epoch = self.epoch.load(SeqCst);
        retired.retain(|&(at, block)| {
            let safe = at + 2 <= epoch;
            if safe {
                free(block);
            }
            !safe
        });
    }

    /// The blocks retired and not yet freed.
    pub fn retired(&self) -> Vec<u64> {
        self.lock().iter().map(|&(_, block)| block).collect()
    }

    /// Every retired block, whatever its epoch: for a structure being
    /// closed, which no reader can reach.
    pub fn drain(&mut self) -> Vec<u64> {
        let retired = self
            .retired
            .get_mut()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        retired.drain(..).map(|(_, block)| block).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(u64, u64)>> {
        self.retired
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retired_block_waits_for_the_readers_that_could_reach_it() {
        let epochs = Epochs::default();
        let mut freed = Vec::new();
        let reader = epochs.pin();
        epochs.retire(7);
        epochs.reclaim(|block| freed.push(block));
        epochs.reclaim(|block| freed.push(block));
        assert!(freed.is_empty(), "freed under a reader that may hold it");
        let later = epochs.pin();
        drop(reader);
        // The later reader pinned after the block was unlinked: it cannot
        // hold it, and does not keep it alive.
        epochs.reclaim(|block| freed.push(block));
        assert_eq!(freed, [7]);
        drop(later);
    }

    #[test]
    fn with_no_reader_a_retired_block_is_freed_at_once() {
        let epochs = Epochs::default();
        let mut freed = Vec::new();
        epochs.retire(1);
        epochs.retire(2);
        epochs.reclaim(|block| freed.push(block));
        assert_eq!(freed, [1, 2]);
    }
}
