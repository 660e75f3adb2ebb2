//! The region's allocator: blocks of 2^c bytes (c from 6: one cache line)
//! carved from the region by a bump pointer and recycled through one free
//! list per size class. Block starts and sizes live in a block map (one
//! byte per line of the region), not in the blocks: a block's bytes are
//! all the caller's, line-aligned (a 16 KiB CCEH segment is exactly one
//! 16 KiB block).
//!
//! Layout, after the region's header (offsets in the region):
//!
//! | bytes | field |
//! |---|---|
//! | 64..72 | `top`: the end of the bump area (blocks lie in `heap_start..top`) |
//! | 72..80 | `clean`: 1 when the region was closed after everything persisted, else 0 |
//! | 128..128 + 8 · CLASSES | free-list heads per class (0: empty); a free block's first word is the next |
//! | MAP.. | the block map: byte `i` describes the line at `64 · i`: 0 inside a block or unused, else `0x80 | used << 6 | c` at a block's first line |
//!
//! Failure atomicity. Every change is a sequence of single stores, each
//! persisted before the next: a block's map byte before `top` moves past
//! it (so every block below `top` has its start in the map), a free list's
//! head by one word. A crash can leave a block popped from a free list but
//! not yet linked by the caller, or unlinked by the caller but not yet on a
//! free list: a leak, and only that. `recover` (after any open that did not
//! find `clean`) reclaims every leak: it walks the map from `heap_start` to
//! `top`, keeps the blocks the structure says it reaches, and rebuilds every
//! free list from the rest, in address order, so that running it twice
//! gives the same bytes. No block is ever handed out twice: after
//! `recover`, the free lists hold exactly the blocks not reached.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use spillway_core::{ensure, Error, Result};

use crate::persist::{Persist, LINE};
use crate::region::{Region, HEADER};

/// Size classes: blocks of 2^6 (64 B) to 2^(6 + CLASSES - 1) bytes.
pub const CLASSES: usize = 32;
const MIN_CLASS: u32 = 6;

const TOP_AT: u64 = HEADER;
const CLEAN_AT: u64 = HEADER + 8;
const FREE_AT: u64 = 2 * LINE;
/// Where the block map starts.
const MAP_AT: u64 = FREE_AT + 8 * CLASSES as u64;

const START: u8 = 0x80;
const USED: u8 = 0x40;

/// A block handed out: its offset, and whether it is fresh (see
/// [`Heap::alloc_block`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    pub at: u64,
    pub fresh: bool,
}

/// The allocator of one region (its state is all in the region; this only
/// serialises changes).
#[derive(Debug)]
pub struct Heap {
    turn: Mutex<()>,
    heap_start: u64,
}

/// The class of a request of `size` bytes.
fn class_of(size: u64) -> u32 {
    size.max(1).next_power_of_two().trailing_zeros().max(MIN_CLASS)
}

fn head_at(class: u32) -> u64 {
    FREE_AT + 8 * u64::from(class - MIN_CLASS)
}

/// Where blocks start in a region of `len` bytes: after the map, on a line.
fn heap_start(len: u64) -> u64 {
    (MAP_AT + len / LINE).div_ceil(LINE) * LINE
}

impl Heap {
    /// Lays out an empty heap in a new region (nothing allocated; closed
    /// clean).
    pub fn format(region: &Region, persist: &impl Persist) -> Result<Heap> {
        let start = heap_start(region.len());
        ensure!(
            start < region.len(),
            InvalidArgument,
            "a region of {} bytes has no room for blocks after its allocator's map",
            region.len()
        );
        // The map and the heads are zero in a new region (the file was
        // extended with zeros); only `top` and `clean` are set.
        persist.store(region, TOP_AT, start);
        persist.store(region, CLEAN_AT, 1);
        persist.flush(region, TOP_AT, 16);
        persist.fence();
        Ok(Heap {
            turn: Mutex::new(()),
            heap_start: start,
        })
    }

    /// The heap of an existing region; and whether it must be recovered
    /// (the region was not closed clean) before anything is allocated. The
    /// region is marked in use (not clean) until [`close`](Self::close).
    pub fn open(region: &Region, persist: &impl Persist) -> Result<(Heap, bool)> {
        let start = heap_start(region.len());
        let top = region.word(TOP_AT).load(Ordering::Acquire);
        if top < start || top > region.len() || !top.is_multiple_of(LINE) {
            return Err(Error::corruption(
                region.path(),
                TOP_AT,
                format!("the allocator's top {top} is outside {start}..={}", region.len()),
            ));
        }
        let clean = region.word(CLEAN_AT).load(Ordering::Acquire) == 1;
        persist.persist_word(region, CLEAN_AT, 0);
        Ok((
            Heap {
                turn: Mutex::new(()),
                heap_start: start,
            },
            !clean,
        ))
    }

    /// Marks the region closed clean: call after the structure's last
    /// change is persisted.
    pub fn close(&self, region: &Region, persist: &impl Persist) {
        let _turn = self.lock();
        persist.persist_word(region, CLEAN_AT, 1);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.turn.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn map_byte(region: &Region, block: u64) -> u8 {
        let at = MAP_AT + block / LINE;
        (region.word(at & !7).load(Ordering::Acquire) >> (8 * (at & 7))) as u8
    }

    /// Sets the map byte of `block` (one byte of a word: a word store that
    /// leaves the other seven bytes as they are, since only this heap,
    /// under its lock, writes the map).
    fn set_map(region: &Region, persist: &impl Persist, block: u64, value: u8) {
        let at = MAP_AT + block / LINE;
        let word = region.word(at & !7).load(Ordering::Acquire);
        let shift = 8 * (at & 7);
        let word = (word & !(0xff << shift)) | (u64::from(value) << shift);
        persist.store(region, at & !7, word);
        persist.flush(region, at & !7, 8);
        persist.fence();
    }

    /// A block of at least `size` bytes (line-aligned; its bytes are not
    /// cleared). The caller links it into its structure; until then a
    /// crash leaks it, and `recover` reclaims it.
    pub fn alloc(&self, region: &Region, persist: &impl Persist, size: u64) -> Result<u64> {
        self.alloc_block(region, persist, size).map(|block| block.at)
    }

    /// As [`alloc`](Self::alloc), saying whether the block is fresh: carved
    /// from above `top`, its bytes were never written since the region was
    /// made, so they are zero on the media and a caller need not flush the
    /// lines it leaves zero. A recycled block holds whatever it held.
    pub fn alloc_block(&self, region: &Region, persist: &impl Persist, size: u64) -> Result<Block> {
        let class = class_of(size);
        ensure!(
            (class as usize) < MIN_CLASS as usize + CLASSES,
            ResourcesExhausted,
            "a block of {size} bytes is larger than the allocator's largest class"
        );
        let _turn = self.lock();
        let head = region.word(head_at(class)).load(Ordering::Acquire);
        if head != 0 {
            let next = region.word(head).load(Ordering::Acquire);
            persist.persist_word(region, head_at(class), next);
            Self::set_map(region, persist, head, START | USED | class as u8);
            return Ok(Block {
                at: head,
                fresh: false,
            });
        }
        let top = region.word(TOP_AT).load(Ordering::Acquire);
        let end = top.checked_add(1 << class).filter(|&end| end <= region.len());
        let Some(end) = end else {
            return Err(Error::ResourcesExhausted(format!(
                "the region {} is full: a block of {} bytes does not fit above {top} of {} bytes",
                region.path().display(),
                1u64 << class,
                region.len()
            )));
        };
        Self::set_map(region, persist, top, START | USED | class as u8);
        persist.persist_word(region, TOP_AT, end);
        Ok(Block { at: top, fresh: true })
    }

    /// Returns `block` (from `alloc`, and unlinked by the caller, durably)
    /// to its class's free list.
    pub fn free(&self, region: &Region, persist: &impl Persist, block: u64) {
        let _turn = self.lock();
        let entry = Self::map_byte(region, block);
        assert!(
            entry & (START | USED) == START | USED && block >= self.heap_start,
            "freeing {block}, which is not an allocated block (map byte {entry:#04x})"
        );
        let class = u32::from(entry & 0x3f);
        let head = region.word(head_at(class)).load(Ordering::Acquire);
        persist.persist_word(region, block, head);
        Self::set_map(region, persist, block, START | class as u8);
        persist.persist_word(region, head_at(class), block);
    }

    /// The size of the block at `block`, if a block starts there.
    pub fn size_of(region: &Region, block: u64) -> Option<u64> {
        let entry = Self::map_byte(region, block);
        (entry & START != 0).then(|| 1 << (entry & 0x3f))
    }

    /// Every block below `top`: (offset, size, used), in address order.
    pub fn blocks(&self, region: &Region) -> Result<Vec<(u64, u64, bool)>> {
        let top = region.word(TOP_AT).load(Ordering::Acquire);
        let mut blocks = Vec::new();
        let mut at = self.heap_start;
        while at < top {
            let entry = Self::map_byte(region, at);
            let class = u32::from(entry & 0x3f);
            if entry & START == 0 || !(MIN_CLASS..MIN_CLASS + CLASSES as u32).contains(&class) {
                return Err(Error::corruption(
                    region.path(),
                    MAP_AT + at / LINE,
                    format!(
                        "no block starts at {at}, below the allocator's top {top} (map byte {entry:#04x})"
                    ),
                ));
            }
            blocks.push((at, 1 << class, entry & USED != 0));
            at += 1 << class;
        }
        if at != top {
            return Err(Error::corruption(
                region.path(),
                TOP_AT,
                format!("the last block ends at {at}, past the allocator's top {top}"),
            ));
        }
        Ok(blocks)
    }

    /// Reclaims every block the structure does not reach (`reached`: the
    /// offsets of the blocks it links, found by its own recovery): each is
    /// marked free and put on its class's list, in address order; each
    /// reached block is marked used. Idempotent, and itself crash-safe (it
    /// only depends on the map's starts, `top` and `reached`).
    pub fn recover(&self, region: &Region, persist: &impl Persist, reached: &HashSet<u64>) -> Result<()> {
        let _turn = self.lock();
        let blocks = self.blocks(region)?;
        let starts: HashSet<u64> = blocks.iter().map(|&(at, ..)| at).collect();
        for &block in reached {
            ensure!(
                starts.contains(&block),
                Internal,
                "the structure reaches {block}, which is not a block"
            );
        }
        let mut heads = [0u64; CLASSES];
        // Built from the top down, so that each list runs in address order.
        for &(at, size, used) in blocks.iter().rev() {
            let class = size.trailing_zeros();
            let keep = reached.contains(&at);
            let entry = START | if keep { USED } else { 0 } | class as u8;
            if used != keep {
                Self::set_map(region, persist, at, entry);
            }
            if !keep {
                let slot = &mut heads[(class - MIN_CLASS) as usize];
                if region.word(at).load(Ordering::Acquire) != *slot {
                    persist.persist_word(region, at, *slot);
                }
                *slot = at;
            }
        }
        for (i, &head) in heads.iter().enumerate() {
            let at = head_at(MIN_CLASS + i as u32);
            if region.word(at).load(Ordering::Acquire) != head {
                persist.persist_word(region, at, head);
            }
        }
        Ok(())
    }

    /// The free blocks of each class, following the lists (checked: inside
    /// the heap, free in the map, of the list's class, no cycle).
    pub fn free_blocks(&self, region: &Region) -> Result<Vec<u64>> {
        let mut free = Vec::new();
        let top = region.word(TOP_AT).load(Ordering::Acquire);
        for i in 0..CLASSES {
            let class = MIN_CLASS + i as u32;
            let mut at = region.word(head_at(class)).load(Ordering::Acquire);
            let mut steps = 0u64;
            while at != 0 {
                let entry = Self::map_byte(region, at);
                let bad = at < self.heap_start
                    || at >= top
                    || entry != START | class as u8
                    || steps > (top - self.heap_start) / LINE;
                if bad {
                    return Err(Error::corruption(
                        region.path(),
                        head_at(class),
                        format!(
                            "the free list of {}-byte blocks reaches {at} (map byte {entry:#04x})",
                            1u64 << class
                        ),
                    ));
                }
                free.push(at);
                steps += 1;
                at = region.word(at).load(Ordering::Acquire);
            }
        }
        Ok(free)
    }
}
