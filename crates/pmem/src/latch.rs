//! What DRAM keeps per segment: a latch (a reader-writer lock with a
//! version, for lock-free searches) and the count of live pairs.
//!
//! Nothing here is persisted: after a crash or a close, every latch is
//! free and every count unknown ("locks reset at open"). A segment is a
//! block of exactly the segment size, so its offset divided by that size
//! names it without collision, and the state is a flat array indexed so,
//! in chunks made on first use (an open costs nothing per segment the
//! region could hold).
//!
//! A latch word holds a writer bit, a count of shared holders (scans), and
//! a version that every exclusive holder moves on release. A lock-free
//! search reads the version ([`Latches::stable`]), reads the segment, and
//! retries unless the version is [`unchanged`](Latches::unchanged): a
//! writer in between moved it.

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::sync::OnceLock;

const WRITER: u64 = 1;
const SHARER: u64 = 2;
const SHARERS: u64 = 0xffff_fffe;
const VERSION: u64 = 1 << 32;

/// A live count not known since the table was opened.
pub const UNKNOWN: u32 = u32::MAX;

const CHUNK: usize = 1024;

/// The state of `CHUNK` segments; a count is stored plus one, so that
/// zero, the initial value, is unknown.
#[derive(Debug)]
struct Chunk {
    words: [AtomicU64; CHUNK],
    counts: [AtomicU32; CHUNK],
}

/// The latches and live counts of every segment a region can hold.
#[derive(Debug)]
pub struct Latches {
    chunks: Box<[OnceLock<Box<Chunk>>]>,
    shift: u32,
}

/// A segment held exclusively, until dropped.
#[derive(Debug)]
pub struct Exclusive<'a> {
    word: &'a AtomicU64,
}

impl Drop for Exclusive<'_> {
    fn drop(&mut self) {
        // A plain store, not an atomic add: no one else changes a word
        // held exclusively (every other change is a compare-exchange that
        // needs the writer bit clear). An x86 atomic add would wait for
        // this thread's flushes to complete, and hold up its next reads.
        let held = self.word.load(Ordering::Relaxed);
        debug_assert!(held & WRITER != 0, "a latch released that was not held");
        self.word.store(held + VERSION - WRITER, Ordering::Release);
    }
}

/// A segment held shared (no writer), until dropped.
#[derive(Debug)]
pub struct Shared<'a> {
    word: &'a AtomicU64,
}

impl Drop for Shared<'_> {
    fn drop(&mut self) {
        self.word.fetch_sub(SHARER, Ordering::Release);
    }
}

/// Waits a moment for a holder: spins first, then lets the holder's
/// thread run (two cores, often two threads).
pub(crate) fn pause(round: &mut u32) {
    *round += 1;
    if *round < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

impl Latches {
    /// State for the segments (of `segment_bytes`, a power of two) of a
    /// region of `region_bytes`.
    pub fn new(region_bytes: u64, segment_bytes: u64) -> Latches {
        let shift = segment_bytes.trailing_zeros();
        let slots = (region_bytes >> shift) as usize + 1;
        Latches {
            chunks: (0..slots.div_ceil(CHUNK)).map(|_| OnceLock::new()).collect(),
            shift,
        }
    }

    fn chunk(&self, segment: u64) -> (&Chunk, usize) {
        let index = (segment >> self.shift) as usize;
        let chunk = self.chunks[index / CHUNK].get_or_init(|| {
            Box::new(Chunk {
                words: std::array::from_fn(|_| AtomicU64::new(0)),
                counts: std::array::from_fn(|_| AtomicU32::new(0)),
            })
        });
        (chunk, index % CHUNK)
    }

    fn word(&self, segment: u64) -> &AtomicU64 {
        let (chunk, at) = self.chunk(segment);
        &chunk.words[at]
    }

    /// Holds `segment` exclusively, waiting for its holders.
    pub fn lock(&self, segment: u64) -> Exclusive<'_> {
        let mut round = 0;
        loop {
            if let Some(exclusive) = self.try_lock(segment) {
                return exclusive;
            }
            pause(&mut round);
        }
    }

    /// Holds `segment` exclusively if no one holds it.
    pub fn try_lock(&self, segment: u64) -> Option<Exclusive<'_>> {
        let word = self.word(segment);
        let now = word.load(Ordering::Relaxed);
        let free = now & (WRITER | SHARERS) == 0;
        (free
            && word
                .compare_exchange(now, now | WRITER, Ordering::Acquire, Ordering::Relaxed)
                .is_ok())
        .then(|| Exclusive { word })
    }

    /// Holds `segment` shared, waiting for a writer to finish.
    pub fn share(&self, segment: u64) -> Shared<'_> {
        let word = self.word(segment);
        let mut round = 0;
        loop {
            let now = word.load(Ordering::Relaxed);
            if now & WRITER == 0
                && word
                    .compare_exchange(now, now + SHARER, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
            {
                return Shared { word };
            }
            pause(&mut round);
        }
    }

    /// The version of `segment` once no writer holds it: a lock-free read
    /// starts here.
    pub fn stable(&self, segment: u64) -> u64 {
        let word = self.word(segment);
        let mut round = 0;
        loop {
            let now = word.load(Ordering::Acquire);
            if now & WRITER == 0 {
                return now & !SHARERS;
            }
            pause(&mut round);
        }
    }

    /// Whether no writer held `segment` since [`stable`](Self::stable)
    /// gave `version`: a lock-free read of it ends here.
    pub fn unchanged(&self, segment: u64, version: u64) -> bool {
        fence(Ordering::Acquire);
        self.word(segment).load(Ordering::Relaxed) & !SHARERS == version
    }

    /// The live pairs of `segment`, or [`UNKNOWN`] (read under its latch).
    pub fn count(&self, segment: u64) -> u32 {
        let (chunk, at) = self.chunk(segment);
        chunk.counts[at].load(Ordering::Relaxed).wrapping_sub(1)
    }

    /// Records the live pairs of `segment` (under its exclusive latch).
    pub fn set_count(&self, segment: u64, count: u32) {
        debug_assert!(count != UNKNOWN);
        let (chunk, at) = self.chunk(segment);
        chunk.counts[at].store(count + 1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writer_excludes_everyone_and_moves_the_version() {
        let latches = Latches::new(1 << 20, 256);
        let version = latches.stable(512);
        let writer = latches.lock(512);
        assert!(latches.try_lock(512).is_none());
        assert!(latches.try_lock(768).is_some(), "another segment is free");
        drop(writer);
        assert!(!latches.unchanged(512, version));
        let version = latches.stable(512);
        let reader = latches.share(512);
        assert!(latches.try_lock(512).is_none(), "a scan holds it");
        assert!(latches.unchanged(512, version), "a scan changes nothing");
        drop(reader);
        assert!(latches.try_lock(512).is_some());
    }
}
