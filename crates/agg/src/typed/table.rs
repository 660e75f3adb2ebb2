//! One partition's table: open addressing with linear probing over rows
//! of fixed width, keys inline, so finding a key's row touches one or two
//! cache lines and nothing points anywhere.
//!
//! Rows are `stride` words: `[key, count, states...]` for fixed-width
//! keys; for byte-string keys `[hash, count, place, states...]`, the key's
//! bytes in the table's arena at `place` (offset << 21 | length), so a
//! probe compares hashes before it reads any key. A count of 0 marks an
//! empty slot, so any 64-bit key can be stored. The table grows (to twice
//! its slots) before an insert could take it past 3/4 full.

use crate::admission::KEY_BYTES_MAX;

/// Bits of a byte-string key's length in its place word.
const LENGTH_BITS: u32 = 21;
const _: () = assert!(KEY_BYTES_MAX < 1 << LENGTH_BITS);

/// Slots of a table's first allocation.
const SLOTS_MIN: usize = 16;

#[derive(Debug)]
pub(super) struct Table {
    /// `slots * stride` words.
    pub(super) words: Vec<u64>,
    stride: usize,
    /// Occupied slots.
    len: usize,
    /// Whether keys are byte strings: word 0 is then their hash, and their
    /// bytes lie in `arena`.
    strings: bool,
    /// The byte-string keys, one after another.
    arena: Vec<u8>,
}

/// Spreads a key word over all 64 bits (MurmurHash3's finalizer, a
/// bijection), so both the top bits (the partition) and the low bits (the
/// slot) depend on every bit of the key.
#[inline]
pub(super) fn hash_word(word: u64) -> u64 {
    let mut hash = word;
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    hash ^ (hash >> 33)
}

/// Whether `a` and `b` hold the same bytes, compared 8 (or 4) at a time
/// for keys of up to 64 bytes: a probe of a short key that called memcmp
/// spent more in the call than in the comparison.
#[inline(always)]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let length = a.len();
    if length != b.len() {
        return false;
    }
    let word = |bytes: &[u8], at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    let half = |bytes: &[u8], at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    match length {
        0..4 => a.iter().zip(b).all(|(x, y)| x == y),
        4..8 => half(a, 0) == half(b, 0) && half(a, length - 4) == half(b, length - 4),
        8..=64 => {
            // Whole words, then the last 8 bytes (overlapping the words).
            (0..length / 8).all(|index| word(a, index * 8) == word(b, index * 8))
                && word(a, length - 8) == word(b, length - 8)
        }
        _ => a == b,
    }
}

/// The bytes at `place` (offset << 21 | length) in `arena`.
fn string_in(arena: &[u8], place: u64) -> &[u8] {
    let at = (place >> LENGTH_BITS) as usize;
    &arena[at..at + (place & ((1 << LENGTH_BITS) - 1)) as usize]
}

impl Table {
    pub(super) fn new(stride: usize, strings: bool) -> Self {
        debug_assert!(stride >= if strings { 3 } else { 2 });
        Table {
            words: Vec::new(),
            stride,
            len: 0,
            strings,
            arena: Vec::new(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    fn slots(&self) -> usize {
        self.words.len() / self.stride
    }

    /// Bytes allocated.
    pub(super) fn bytes(&self) -> u64 {
        (self.words.capacity() * 8 + self.arena.capacity()) as u64
    }

    /// The slots the table needs to take `extra` new keys: its own, or
    /// twice as many as often as it takes to stay at most 3/4 full.
    fn slots_for(&self, extra: usize) -> usize {
        let needed = self.len + extra;
        if needed * 4 <= self.slots() * 3 {
            return self.slots();
        }
        let mut slots = self.slots().max(SLOTS_MIN);
        while needed * 4 > slots * 3 {
            slots *= 2;
        }
        slots
    }

    /// The bytes the table's rows would take once it made room for
    /// `extra` new keys (its arena aside).
    pub(super) fn bytes_for(&self, extra: usize) -> u64 {
        (self.slots_for(extra) * self.stride * 8) as u64
    }

    /// Makes room for `extra` new keys without growing, so the row indices
    /// of a run stay valid while it is folded in.
    pub(super) fn reserve(&mut self, extra: usize) {
        let slots = self.slots_for(extra);
        if slots == self.slots() {
            return;
        }
        // Zeros written, not `vec![0; n]`: a calloc'd table's pages are
        // first mapped to the shared zero page by the probe's read and
        // copied at its first write, a second fault that shoots down
        // every thread's TLB entry for the page.
        // Huge pages where the kernel gives them: a 2 MiB page faults
        // once, where 512 pages of 4 KiB fault 512 times.
        let mut words = Vec::with_capacity(slots * self.stride);
        spillway_core::memory::advise_huge_pages(&mut words);
        words.resize(slots * self.stride, 0);
        let old = std::mem::replace(&mut self.words, words);
        let mask = slots - 1;
        for row in old.chunks_exact(self.stride).filter(|row| row[1] != 0) {
            let hash = self.hash_of(row);
            let mut slot = hash as usize & mask;
            while self.words[slot * self.stride + 1] != 0 {
                slot = (slot + 1) & mask;
            }
            self.words[slot * self.stride..(slot + 1) * self.stride].copy_from_slice(row);
        }
    }

    /// Asks for the cache lines of the slot where a probe for `hash`
    /// starts, so a run's probes overlap their misses. Room must have been
    /// reserved.
    #[inline]
    pub(super) fn prefetch(&self, hash: u64) {
        let at = (hash as usize & (self.slots() - 1)) * self.stride;
        spillway_core::memory::prefetch(&self.words[at]);
        spillway_core::memory::prefetch(&self.words[at + self.stride - 1]);
    }

    /// The row of `key` (whose hash is `hash`), made from `empty` (a whole
    /// row of empty states) if the key is new, with its count raised by
    /// one. Room must have been reserved.
    #[inline]
    pub(super) fn count_in(&mut self, key: u64, hash: u64, empty: &[u64]) -> u32 {
        debug_assert!(!self.strings);
        self.count_by(hash, key, |row, _| row[0] == key, &[], empty)
    }

    /// [`count_in`](Self::count_in) for a byte-string key: a new key's
    /// bytes go to the arena.
    #[inline]
    pub(super) fn count_in_string(&mut self, key: &[u8], hash: u64, empty: &[u64]) -> u32 {
        debug_assert!(self.strings);
        let matches = |row: &[u64], arena: &[u8]| row[0] == hash && same_bytes(string_in(arena, row[2]), key);
        self.count_by(hash, hash, matches, key, empty)
    }

    /// The probe both keys share: the first row from `hash`'s slot that
    /// `matches` has its count raised; an empty slot met first becomes
    /// the key's row, word 0 `head` (and, for byte strings, `key` appended
    /// to the arena).
    #[inline(always)]
    fn count_by(
        &mut self,
        hash: u64,
        head: u64,
        matches: impl Fn(&[u64], &[u8]) -> bool,
        key: &[u8],
        empty: &[u64],
    ) -> u32 {
        debug_assert!(self.len < self.slots());
        let mask = self.slots() - 1;
        let stride = self.stride;
        let mut slot = hash as usize & mask;
        loop {
            let at = slot * stride;
            let count = self.words[at + 1];
            if count == 0 {
                // A word at a time: rows are a few words, and a call to
                // memcpy per new key cost more than the copy.
                for (word, &state) in self.words[at..at + stride].iter_mut().zip(empty) {
                    *word = state;
                }
                self.words[at] = head;
                self.words[at + 1] = 1;
                if self.strings {
                    self.words[at + 2] = (self.arena.len() as u64) << LENGTH_BITS | key.len() as u64;
                    spillway_core::memory::extend_small(&mut self.arena, key);
                }
                self.len += 1;
                return slot as u32;
            }
            if matches(&self.words[at..at + stride], &self.arena) {
                self.words[at + 1] = count + 1;
                return slot as u32;
            }
            slot = (slot + 1) & mask;
        }
    }

    /// Takes in `row` of another table, whose key (`key`'s bytes, for
    /// byte strings) this table does not hold, with its hash `hash`. Room
    /// must have been reserved.
    pub(super) fn take_row(&mut self, row: &[u64], hash: u64, key: &[u8]) {
        debug_assert!(self.len < self.slots());
        let mask = self.slots() - 1;
        let mut slot = hash as usize & mask;
        while self.words[slot * self.stride + 1] != 0 {
            slot = (slot + 1) & mask;
        }
        let at = slot * self.stride;
        self.words[at..at + self.stride].copy_from_slice(row);
        if self.strings {
            self.words[at + 2] = (self.arena.len() as u64) << LENGTH_BITS | key.len() as u64;
            self.arena.extend_from_slice(key);
        }
        self.len += 1;
    }

    /// The hash a row's key was placed by.
    pub(super) fn hash_of(&self, row: &[u64]) -> u64 {
        if self.strings {
            row[0]
        } else {
            hash_word(row[0])
        }
    }

    /// Bytes of the byte-string keys held.
    pub(super) fn string_bytes(&self) -> usize {
        self.arena.len()
    }

    /// The bytes of the key whose place word is `place`.
    pub(super) fn string_at(&self, place: u64) -> &[u8] {
        string_in(&self.arena, place)
    }

    /// The row of the byte-string `key`, if it has one.
    pub(super) fn string_row(&self, key: &[u8], hash: u64) -> Option<&[u64]> {
        self.find(hash, |row| {
            row[0] == hash && same_bytes(self.string_at(row[2]), key)
        })
    }

    /// The row of `key`, if it has one.
    pub(super) fn row(&self, key: u64, hash: u64) -> Option<&[u64]> {
        self.find(hash, |row| row[0] == key)
    }

    /// The first occupied row from `hash`'s slot on that `matches`, before
    /// an empty slot.
    fn find(&self, hash: u64, matches: impl Fn(&[u64]) -> bool) -> Option<&[u64]> {
        if self.len == 0 {
            return None;
        }
        let mask = self.slots() - 1;
        let mut slot = hash as usize & mask;
        loop {
            let row = &self.words[slot * self.stride..(slot + 1) * self.stride];
            if row[1] == 0 {
                return None;
            }
            if matches(row) {
                return Some(row);
            }
            slot = (slot + 1) & mask;
        }
    }

    /// Every occupied row, in slot order.
    pub(super) fn rows(&self) -> impl Iterator<Item = &[u64]> {
        self.words.chunks_exact(self.stride).filter(|row| row[1] != 0)
    }
}

#[cfg(test)]
mod tests {
    use super::same_bytes;

    #[test]
    fn bytes_compare_equal_exactly_when_they_are_at_every_length() {
        for length in 0..80 {
            let a: Vec<u8> = (0..length as u8).collect();
            assert!(same_bytes(&a, &a.clone()), "{length}");
            for at in 0..length {
                let mut b = a.clone();
                b[at] ^= 1;
                assert!(!same_bytes(&a, &b), "{length} differing at {at}");
            }
            assert!(!same_bytes(&a, &a[..length.saturating_sub(1)]) || length == 0);
        }
    }
}
