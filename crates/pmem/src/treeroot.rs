//! What both persistent trees stand on: their shape ([`Options`]), their
//! statistics ([`TreeStats`]), their root object, and the range bounds
//! their scans read. (The trees, `b3tree` and `fastfair`, build on this;
//! `tree` builds on them.)

use std::ops::{Bound, RangeBounds};
use std::sync::atomic::Ordering;

use spillway_core::{ensure, Error, Result};

use crate::heap::Heap;
use crate::persist::Persist;
use crate::record::Keys;
use crate::region::{Region, LINE};

/// A B3-tree's bytes per page unless told otherwise: 4 KiB (the seed's
/// leaves are eight times FAST&FAIR's 512-byte nodes).
pub const PAGE_BYTES: u64 = 4096;

/// A tree's shape.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Bytes per page: a power of two from 512 (small pages make splits
    /// frequent in tests) to 64 KiB.
    pub page_bytes: u64,
    pub region_bytes: u64,
    /// What the tree maps: u64 keys and values, or byte strings (the
    /// B3-tree's only; see [`record`](crate::record) for the limits).
    pub keys: Keys,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            page_bytes: PAGE_BYTES,
            region_bytes: 1 << 30,
            keys: Keys::U64,
        }
    }
}

/// What a tree's persistence did, and its shape.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TreeStats {
    pub persistence: String,
    pub flushes: u64,
    pub fences: u64,
    pub page_bytes: u64,
    /// Levels of pages, the leaves included.
    pub height: u32,
    pub region_bytes: u64,
    /// Bytes of the region mapped in 2 MiB pages.
    pub huge_page_bytes: u64,
    /// Pages split since the open.
    pub splits: u64,
    /// Pages rebuilt as complete trees since the open (the B3-tree's, when
    /// a split or merge leaves one too deep).
    pub rebuilds: u64,
    /// Sparse pages merged into their left neighbour since the open (the
    /// B3-tree's; the baseline does not merge).
    pub merges: u64,
    /// Of the flushes, those made by merges and redistributions (a
    /// removal's share of balancing the tree).
    pub merge_flushes: u64,
}

/// Checks a tree's shape.
pub(crate) fn check(options: &Options) -> Result<()> {
    let bytes = options.page_bytes;
    ensure!(
        bytes.is_power_of_two() && (512..=1 << 16).contains(&bytes),
        InvalidArgument,
        "a tree's page is a power of two from 512 bytes to 64 KiB, not {bytes}"
    );
    Ok(())
}

/// The first key a range of keys can hold (`None`: none).
pub(crate) fn first_key(keys: &impl RangeBounds<u64>) -> Option<u64> {
    match keys.start_bound() {
        Bound::Included(&low) => Some(low),
        Bound::Excluded(&low) => low.checked_add(1),
        Bound::Unbounded => Some(0),
    }
}

/// The last key a range of keys can hold (`None`: none).
pub(crate) fn last_key(keys: &impl RangeBounds<u64>) -> Option<u64> {
    match keys.end_bound() {
        Bound::Included(&high) => Some(high),
        Bound::Excluded(&high) => high.checked_sub(1),
        Bound::Unbounded => Some(u64::MAX),
    }
}

// A tree's root object (one line): magic, page size, root page, what it
// maps (0: u64 keys, 1: bytes keys).
const ROOT_MAGIC: u64 = 0;
const ROOT_PAGE_BYTES: u64 = 8;
const ROOT_PAGE: u64 = 16;
const ROOT_KEYS: u64 = 24;

/// A tree's root object: the region's root, naming the tree's kind (its
/// magic), its page size, its root page (a page's parent link is this
/// word: a new root is published by one store of it) and what it maps.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RootObject {
    pub at: u64,
    pub page_bytes: u64,
    pub keys: Keys,
}

impl RootObject {
    /// Formats `region`'s heap and a root object of `magic` over a first
    /// page of `page_bytes`, which `build` writes (flushed; the fence is
    /// this). The tree is in use from here on: a crash before its first
    /// close is recovered.
    pub fn format(
        region: &Region,
        persist: &impl Persist,
        magic: u64,
        options: &Options,
        build: impl FnOnce(u64),
    ) -> Result<(Heap, RootObject)> {
        let page_bytes = options.page_bytes;
        let heap = Heap::format(region, persist)?;
        let at = heap.alloc(region, persist, LINE)?;
        let page = heap.alloc(region, persist, page_bytes)?;
        build(page);
        persist.store(region, at + ROOT_PAGE_BYTES, page_bytes);
        persist.store(region, at + ROOT_PAGE, page);
        persist.store(region, at + ROOT_KEYS, options.keys.word());
        persist.store(region, at + ROOT_MAGIC, magic);
        persist.flush(region, at, LINE);
        persist.fence();
        persist.set_root(region, at);
        heap.close(region, persist);
        let (heap, _) = Heap::open(region, persist)?;
        Ok((
            heap,
            RootObject {
                at,
                page_bytes,
                keys: options.keys,
            },
        ))
    }

    /// The heap and root object of `region`, checked to be a `what` (of
    /// `magic`) with a page size [`check`] accepts, and whether it was not
    /// closed clean.
    pub fn open(
        region: &Region,
        persist: &impl Persist,
        magic: u64,
        what: &str,
    ) -> Result<(Heap, RootObject, bool)> {
        let (heap, dirty) = Heap::open(region, persist)?;
        let at = region.root();
        let word = |offset: u64| region.word(at + offset).load(Ordering::Acquire);
        if at == 0 || word(ROOT_MAGIC) != magic {
            return Err(Error::corruption(
                region.path(),
                at,
                format!("no {what} root object"),
            ));
        }
        let page_bytes = word(ROOT_PAGE_BYTES);
        let keys = Keys::from_word(word(ROOT_KEYS)).ok_or_else(|| {
            Error::corruption(
                region.path(),
                at + ROOT_KEYS,
                format!("keys of kind {}, neither u64 (0) nor bytes (1)", word(ROOT_KEYS)),
            )
        })?;
        let options = Options {
            page_bytes,
            region_bytes: region.len(),
            keys,
        };
        if check(&options).is_err() {
            return Err(Error::corruption(
                region.path(),
                at + ROOT_PAGE_BYTES,
                format!("a page of {page_bytes} bytes"),
            ));
        }
        Ok((heap, RootObject { at, page_bytes, keys }, dirty))
    }

    /// The root page.
    pub fn page(&self, region: &Region) -> u64 {
        region.word(self.at + ROOT_PAGE).load(Ordering::Acquire)
    }

    /// Publishes `page` as the root: one store of the root word.
    pub fn set_page(&self, region: &Region, persist: &impl Persist, page: u64) {
        persist.persist_word(region, self.at + ROOT_PAGE, page);
    }

    /// The statistics of a tree whose root page is at `level`, which made
    /// `splits`, `rebuilds`, `merges` and `merge_flushes` since its open.
    pub fn stats(
        &self,
        region: &Region,
        persist: &impl Persist,
        level: u8,
        [splits, rebuilds, merges, merge_flushes]: [u64; 4],
    ) -> TreeStats {
        TreeStats {
            persistence: persist.name(),
            flushes: persist.counts().flushes(),
            fences: persist.counts().fences(),
            page_bytes: self.page_bytes,
            height: u32::from(level) + 1,
            region_bytes: region.len(),
            huge_page_bytes: region.huge_page_bytes(),
            splits,
            rebuilds,
            merges,
            merge_flushes,
        }
    }
}
