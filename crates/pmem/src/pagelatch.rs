//! What DRAM keeps per B3-tree page: a writer's latch, which holds the
//! page's node slots (learnt from the media at the first write since the
//! open), and a version for lock-free readers.
//!
//! A writer holds a page's latch while it stores to the page, and moves
//! its version from even to odd when it takes it and to even again when it
//! lets it go. A reader notes the version once it is even
//! ([`PageLatches::stable`]), reads the page, and keeps what it read only
//! if the version is [`unchanged`](PageLatches::unchanged): a write in
//! between, however it interleaved with the reads, moved it. A page merged
//! away or rebuilt elsewhere is marked dead (`DEAD`, kept until the block
//! is built again as a page): a reader that reaches it through a link
//! read before it died starts again from the root. (A writer never meets
//! one: pages die only while the tree's writers wait.)
//!
//! Nothing here is persisted: after an open every latch is free and every
//! page's slots unknown. A page is a block of exactly the page size, so
//! its offset divided by that size names it without collision; the state
//! is in flat arrays indexed so, in chunks made on first use: the versions
//! apart from the latches, 8 bytes a page, so that a reader's look at a
//! version is a hit in the cache as often as can be.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use spillway_core::Result;

use crate::b3page::{Page, Slots};
use crate::latch::pause;
use crate::region::Region;

/// The version's mark of a dead page.
const DEAD: u64 = 1 << 63;

const CHUNK: usize = 1024;

/// Per-page state in chunks of `CHUNK` pages, each made on first use.
type Chunks<T> = Box<[OnceLock<Box<[T]>>]>;

/// The state of page `index` in `chunks`.
fn state<T: Default>(chunks: &Chunks<T>, index: usize) -> &T {
    let chunk = chunks[index / CHUNK].get_or_init(|| (0..CHUNK).map(|_| T::default()).collect());
    &chunk[index % CHUNK]
}

/// The latches and versions of every page a region can hold.
#[derive(Debug)]
pub struct PageLatches {
    versions: Chunks<AtomicU64>,
    latches: Chunks<Mutex<Option<Slots>>>,
    shift: u32,
}

/// A page latched by a writer, its version odd until dropped.
#[derive(Debug)]
pub struct Writing<'a> {
    version: &'a AtomicU64,
    slots: MutexGuard<'a, Option<Slots>>,
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.version.fetch_add(1, Ordering::Release);
    }
}

impl Writing<'_> {
    /// The page's slots, learnt from the media if not known yet.
    pub fn slots(&mut self, page: Page, region: &Region) -> Result<&mut Slots> {
        if self.slots.is_none() {
            *self.slots = Some(page.slots(region)?.0);
        }
        Ok(self.slots.as_mut().expect("just learnt"))
    }

    /// Sets the page's slots (a page just built, or just pruned).
    pub fn set(&mut self, slots: Slots) {
        *self.slots = Some(slots);
    }

    /// Forgets the page's slots, to be learnt again from the media (a
    /// recovery changed the page).
    pub fn forget(&mut self) {
        *self.slots = None;
    }

    /// Marks the page dead: unlinked, to be freed once no reader can
    /// stand on it.
    pub fn kill(&mut self) {
        self.version.fetch_or(DEAD, Ordering::Relaxed);
        *self.slots = None;
    }
}

impl PageLatches {
    /// State for the pages (of `page_bytes`, a power of two) of a region
    /// of `region_bytes`.
    pub fn new(region_bytes: u64, page_bytes: u64) -> PageLatches {
        let shift = page_bytes.trailing_zeros();
        let pages = (region_bytes >> shift) as usize + 1;
        let chunks = pages.div_ceil(CHUNK);
        PageLatches {
            versions: (0..chunks).map(|_| OnceLock::new()).collect(),
            latches: (0..chunks).map(|_| OnceLock::new()).collect(),
            shift,
        }
    }

    fn version(&self, at: u64) -> &AtomicU64 {
        state(&self.versions, (at >> self.shift) as usize)
    }

    fn latch(&self, at: u64) -> MutexGuard<'_, Option<Slots>> {
        state(&self.latches, (at >> self.shift) as usize)
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Latches the page at `at` for a writer (waiting for another), its
    /// version made odd.
    pub fn write(&self, at: u64) -> Writing<'_> {
        let slots = self.latch(at);
        let version = self.version(at);
        version.fetch_add(1, Ordering::SeqCst);
        Writing { version, slots }
    }

    /// The page's slots, learnt from the media if not known yet, read
    /// under its latch without moving its version (a writer's look).
    pub fn used(&self, page: Page, region: &Region) -> Result<u32> {
        let mut slots = self.latch(page.at);
        if slots.is_none() {
            *slots = Some(page.slots(region)?.0);
        }
        Ok(slots.as_ref().expect("just learnt").used())
    }

    /// Marks the block at `at` a live page again, built with `slots`
    /// (no reader reaches it yet).
    pub fn revive(&self, at: u64, slots: Slots) {
        let mut writing = self.write(at);
        writing.version.fetch_and(!DEAD, Ordering::Relaxed);
        writing.set(slots);
    }

    /// The version of the page at `at` once no writer holds it (a
    /// lock-free read of the page starts here), or `None` for a dead page.
    pub fn stable(&self, at: u64) -> Option<u64> {
        let version = self.version(at);
        let mut round = 0;
        loop {
            let now = version.load(Ordering::Acquire);
            if now & DEAD != 0 {
                return None;
            }
            if now & 1 == 0 {
                return Some(now);
            }
            pause(&mut round);
        }
    }

    /// Whether no writer latched the page at `at` since
    /// [`stable`](Self::stable) gave `version`: a lock-free read of it
    /// ends here.
    pub fn unchanged(&self, at: u64, version: u64) -> bool {
        fence(Ordering::Acquire);
        self.version(at).load(Ordering::Relaxed) == version
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writer_moves_the_version_and_a_dead_page_has_none() {
        let latches = PageLatches::new(1 << 20, 512);
        let version = latches.stable(1024).unwrap();
        let writing = latches.write(1024);
        assert!(
            latches.unchanged(2048, latches.stable(2048).unwrap()),
            "another page"
        );
        drop(writing);
        assert!(!latches.unchanged(1024, version));
        let version = latches.stable(1024).unwrap();
        assert!(latches.unchanged(1024, version));
        latches.write(1024).kill();
        assert!(latches.stable(1024).is_none());
        latches.revive(1024, Slots::built(3));
        let version = latches.stable(1024).unwrap();
        assert!(version & DEAD == 0 && version & 1 == 0);
    }
}
