//! The root buffer (seed 001 §3.1): records appended in memory as they
//! arrive, found by GETs through a small hash index, and sorted by hash
//! and collapsed when the buffer spills.
//!
//! Flat and allocation-free per record: every record's bytes go to one
//! arena, every record gets a 12-byte entry, and the index is an
//! open-addressing table of 8-byte slots keyed by the upper half of the
//! key's hash (already a good hash), whose top bits place the slot. A slot
//! holds that half and the number of the newest entry with it, so probing
//! past other hashes reads nothing but the table. Records whose hashes
//! share the upper half (older records of the same key among them) are
//! chained through their entries, newest first; an entry keeps the lower
//! half, so the whole hash is known without reading the record.
//!
//! Placing slots by the top bits keeps the table in hash order but for
//! the few slots that probing moved on: a spill reads it front to back
//! and only puts those few back in place, where sorting the whole root
//! by hash took most of a root spill's first, single-threaded step.
//!
//! Index bytes are what a root spends instead of records: at 16-byte
//! records, 16-byte entries and slots let a 64 MiB root hold 0.96 M
//! records, these 1.57 M, and every list a root spill writes grows with
//! them. The store freezes a root before a batch would grow its table
//! past `root_bytes` ([`bytes_with`](RootBuffer::bytes_with)).
//!
//! The table is larger than the caches, so an insert's slot is a cache
//! miss. A batch therefore prefetches all its slots first, then inserts,
//! so the misses overlap instead of following one another.
//!
//! ```text
//! arena record = kind u8 | key length varint | value length varint | key | value
//! ```

use std::sync::Arc;

use spillway_core::memory::prefetch;
use spillway_core::{Hash64, Result};

use crate::batch::WriteBatch;
use crate::collapse::{Folded, Source};
use crate::merge::MergeOperator;
use crate::record::{self, Kind, RecordRef, RecordSpan};

/// No older entry with the same upper half of the hash.
const NONE: u32 = u32::MAX;
/// Bytes of the fixed part of an entry.
const ENTRY_BYTES: usize = size_of::<Entry>();
/// The largest arena: entries hold 32-bit offsets.
pub const ROOT_BYTES_MAX: usize = 1 << 31;
/// How far ahead of the record it works on an insert or a sorted run
/// prefetches: enough misses in flight to cover the memory's latency,
/// few enough that none is evicted before it is used.
const READ_AHEAD: usize = 16;
/// Slots of a new table.
const TABLE_SLOTS_MIN: usize = 1024;

#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Where the record starts in the arena.
    offset: u32,
    /// The next older entry with the same upper half of the hash, or
    /// [`NONE`].
    older: u32,
    /// The lower half of the record's hash.
    low: u32,
}

/// A table slot: the upper half of a hash, and the entry number + 1 of the
/// newest entry with it (0: empty). The half is kept so that probing never
/// reads an entry (another cache miss).
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    high: u32,
    head: u32,
}

/// The halves of a hash: the upper one keys the table, the lower one
/// stays with the entry.
fn halves(hash: Hash64) -> (u32, u32) {
    (hash as u32, (hash >> 32) as u32)
}

/// Where a table of `slots` slots (a power of two) places the upper half
/// `high`: its top bits, so that slots follow hash order.
fn home(high: u32, slots: usize) -> usize {
    ((u64::from(high) * slots as u64) >> 32) as usize
}

/// The hash of its halves.
fn whole(low: u32, high: u32) -> Hash64 {
    u64::from(high) << 32 | u64::from(low)
}

/// An in-memory root buffer.
#[derive(Debug, Clone)]
pub struct RootBuffer {
    arena: Vec<u8>,
    entries: Vec<Entry>,
    table: Vec<Slot>,
}

impl Default for RootBuffer {
    fn default() -> Self {
        RootBuffer {
            arena: Vec::new(),
            entries: Vec::new(),
            table: vec![Slot::default(); TABLE_SLOTS_MIN],
        }
    }
}

/// A root buffer's records in (hash, key, age) order: each record's hash
/// and where it starts in the arena (which grows with age).
pub type SortedOrder = Vec<(Hash64, u32)>;

impl RootBuffer {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds no record.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes the buffer accounts for: records, entries and the index.
    pub fn bytes(&self) -> usize {
        self.bytes_with(0, 0)
    }

    /// Bytes the buffer would account for with `records` more records of
    /// `data_bytes` (the table grown if they need it): what a store checks
    /// before a batch, so that no batch doubles the table past the root's
    /// budget.
    pub fn bytes_with(&self, records: usize, data_bytes: usize) -> usize {
        let entries = self.entries.len() + records;
        let slots = if self.is_over_load(entries) {
            Self::grown_slots(self.table.len(), entries)
        } else {
            self.table.len()
        };
        self.arena.len() + data_bytes + entries * ENTRY_BYTES + slots * size_of::<Slot>()
    }

    /// Appends the records of `batch`, in order: their bytes in one copy
    /// (the batch holds them in the arena's form), then an entry each.
    pub fn insert_batch(&mut self, batch: &WriteBatch) {
        assert!(
            self.arena.len() + batch.data_bytes() <= ROOT_BYTES_MAX,
            "root buffer over {ROOT_BYTES_MAX} bytes"
        );
        if self.is_over_load(self.entries.len() + batch.len()) {
            self.grow_table(self.entries.len() + batch.len());
        }
        let base = self.arena.len() as u32;
        self.arena.extend_from_slice(batch.data());
        let slots = self.table.len();
        let hashes = batch.hashes();
        let slot = |hash: Hash64| home(halves(hash).1, slots);
        for &hash in hashes.iter().take(READ_AHEAD) {
            prefetch(&self.table[slot(hash)]);
        }
        for (index, (&hash, &start)) in hashes.iter().zip(batch.starts()).enumerate() {
            // The slot a few records on is a cache miss: ask for it now.
            if let Some(&ahead) = hashes.get(index + READ_AHEAD) {
                prefetch(&self.table[slot(ahead)]);
            }
            self.add_entry(hash, base + start);
        }
    }

    /// Adds the entry of a record at `offset` in the arena, the newest of
    /// its hash.
    #[inline]
    fn add_entry(&mut self, hash: Hash64, offset: u32) {
        let (low, high) = halves(hash);
        let older = self.link(high, self.entries.len() as u32);
        self.entries.push(Entry { offset, older, low });
    }

    /// Appends a record with the hash given (tests give colliding ones).
    #[cfg(test)]
    fn insert(&mut self, hash: Hash64, kind: Kind, key: &[u8], value: &[u8]) {
        assert!(
            self.arena.len() < ROOT_BYTES_MAX,
            "root buffer over {ROOT_BYTES_MAX} bytes"
        );
        let offset = self.arena.len() as u32;
        record::encode_body(kind, key, value, &mut self.arena);
        if self.is_over_load(self.entries.len() + 1) {
            self.grow_table(self.entries.len() + 1);
        }
        self.add_entry(hash, offset);
    }

    /// Whether `entries` distinct hashes would fill the table past three
    /// quarters (linear probing stays short below that).
    fn is_over_load(&self, entries: usize) -> bool {
        entries * 4 > self.table.len() * 3
    }

    /// Makes entry `number` the newest with upper half `high` in the
    /// table; returns the entry it replaces there.
    fn link(&mut self, high: u32, number: u32) -> u32 {
        let mask = self.table.len() - 1;
        let mut at = home(high, self.table.len());
        loop {
            let slot = &mut self.table[at];
            if slot.head == 0 || slot.high == high {
                let older = slot.head.wrapping_sub(1);
                *slot = Slot {
                    high,
                    head: number + 1,
                };
                return older;
            }
            at = (at + 1) & mask;
        }
    }

    /// Slots of a table of `slots` grown to hold `entries` at a load of
    /// at most a half.
    fn grown_slots(slots: usize, entries: usize) -> usize {
        (entries * 2).next_power_of_two().max(slots * 2)
    }

    /// Grows the table to hold `entries` at a load of at most a half.
    fn grow_table(&mut self, entries: usize) {
        let heads: Vec<Slot> = self.table.iter().filter(|slot| slot.head != 0).copied().collect();
        self.table = vec![Slot::default(); Self::grown_slots(self.table.len(), entries)];
        for head in heads {
            self.link(head.high, head.head - 1);
        }
    }

    /// Empties the buffer, keeping its memory: a store recycles a spilled
    /// root as its next one, so two roots' worth of memory is allocated
    /// once rather than again at every spill (which the allocator may not
    /// give back to the system).
    pub fn clear(&mut self) {
        self.arena.clear();
        self.entries.clear();
        self.table.fill(Slot::default());
    }

    /// The record starting at `offset` in the arena, with its hash.
    fn record_at(&self, hash: Hash64, offset: u32) -> RecordRef<'_> {
        let ((kind, key, value), _) =
            record::decode_body(&self.arena[offset as usize..]).expect("the arena holds whole records");
        RecordRef {
            hash,
            kind,
            key,
            value,
        }
    }

    /// Calls `visit` with the records of `key`, newest first, while it
    /// returns `true`.
    pub fn get(&self, hash: Hash64, key: &[u8], mut visit: impl FnMut(Kind, &[u8]) -> bool) {
        let (low, high) = halves(hash);
        let mask = self.table.len() - 1;
        let mut at = home(high, self.table.len());
        let mut number = loop {
            let slot = self.table[at];
            if slot.head == 0 {
                return;
            }
            if slot.high == high {
                break slot.head - 1;
            }
            at = (at + 1) & mask;
        };
        while number != NONE {
            let entry = self.entries[number as usize];
            if entry.low == low {
                let record = self.record_at(hash, entry.offset);
                if record.key == key && !visit(record.kind, record.value) {
                    return;
                }
            }
            number = entry.older;
        }
    }

    /// The records in (hash, key) order, older first among records of one
    /// key.
    pub fn sorted(&self) -> SortedOrder {
        // Every entry hangs off the slot of its hash's upper half, and the
        // slots follow hash order but for those that probing moved past
        // others (a few places on; from the end round to the start for
        // some). The table is read in order; the chains' entries lie all
        // over, so the first of a slot some way on is asked for ahead.
        let mut order: SortedOrder = Vec::with_capacity(self.entries.len());
        let mut wrapped = Vec::new();
        for (index, slot) in self.table.iter().enumerate() {
            if let Some(ahead) = self.table.get(index + READ_AHEAD).filter(|ahead| ahead.head != 0) {
                prefetch(&self.entries[ahead.head as usize - 1]);
            }
            if slot.head == 0 {
                continue;
            }
            let start = order.len();
            let mut number = slot.head - 1;
            while number != NONE {
                let entry = self.entries[number as usize];
                order.push((whole(entry.low, slot.high), entry.offset));
                number = entry.older;
            }
            // Newest first in the chain: older first in the order.
            order[start..].reverse();
            if home(slot.high, self.table.len()) > index {
                wrapped.extend(order.drain(start..));
            }
        }
        order.append(&mut wrapped);
        debug_assert_eq!(order.len(), self.entries.len());
        sort_nearly_sorted(&mut order);
        // Runs of equal hashes (colliding keys, or one key written again)
        // go by key, then age; they are short.
        let mut start = 0;
        while start < order.len() {
            let hash = order[start].0;
            let mut end = start + 1;
            while end < order.len() && order[end].0 == hash {
                end += 1;
            }
            if end - start > 1 {
                order[start..end].sort_by(|a, b| {
                    (self.record_at(a.0, a.1).key, a.1).cmp(&(self.record_at(b.0, b.1).key, b.1))
                });
            }
            start = end;
        }
        order
    }
}

/// Sorts `(hash, offset)` pairs that are in order but for a few out of
/// place by a short way: an insertion sort, whose moves are as many as the
/// pairs out of order, falling back to a comparison sort past a few moves
/// per pair (hashes that share their top bits, as tests make, pile up in
/// one slot's chain).
fn sort_nearly_sorted(order: &mut SortedOrder) {
    const MOVES_PER_PAIR: usize = 8;
    let budget = order.len() * MOVES_PER_PAIR;
    let mut moves = 0;
    for index in 1..order.len() {
        let pair = order[index];
        if pair >= order[index - 1] {
            continue;
        }
        let mut at = index;
        while at > 0 && order[at - 1] > pair {
            order[at] = order[at - 1];
            at -= 1;
        }
        order[at] = pair;
        moves += index - at;
        if moves > budget {
            order.sort_unstable();
            return;
        }
    }
}

/// A root buffer's records in (hash, key) order, within a hash range, a
/// key's versions folded into one: a [`Source`] for spills and scans.
pub struct SortedRun {
    root: Arc<RootBuffer>,
    order: Arc<SortedOrder>,
    end: usize,
    /// The next position; `first` before the first `advance`.
    next: usize,
    /// The current record, in the arena, unless several versions were
    /// folded into `key` and `folded`.
    current: Option<RecordSpan>,
    merge: Option<Arc<dyn MergeOperator>>,
    key: Vec<u8>,
    folded: Folded,
    /// Versions folded into newer ones so far.
    collapsed: u64,
}

impl std::fmt::Debug for SortedRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SortedRun")
            .field("next", &self.next)
            .field("end", &self.end)
            .finish_non_exhaustive()
    }
}

impl SortedRun {
    /// The records of `root` (sorted as `order`) with hashes in
    /// `low..=high`, MERGE records folded with `merge`.
    pub fn new(
        root: Arc<RootBuffer>,
        order: Arc<SortedOrder>,
        low: Hash64,
        high: Hash64,
        merge: Option<Arc<dyn MergeOperator>>,
    ) -> Self {
        let first = order.partition_point(|&(hash, _)| hash < low);
        let end = order.partition_point(|&(hash, _)| hash <= high);
        SortedRun {
            end: end.max(first),
            next: first,
            root,
            order,
            current: None,
            merge,
            key: Vec::new(),
            folded: Folded::default(),
            collapsed: 0,
        }
    }

    /// Folds the versions of the key of the record at `offset` (hash
    /// `hash`), which follow it in the order older first, into
    /// `self.folded`; leaves `self.next` past them.
    fn fold_versions(&mut self, hash: Hash64, offset: u32) -> Result<()> {
        let first = self.root.record_at(hash, offset);
        self.key.clear();
        self.key.extend_from_slice(first.key);
        self.folded.start(first.kind, first.value);
        while let Some(&(next_hash, at)) = self.order[..self.end].get(self.next) {
            let record = self.root.record_at(next_hash, at);
            if next_hash != hash || record.key != self.key.as_slice() {
                break;
            }
            self.folded
                .apply(&self.key, record.kind, record.value, self.merge.as_deref())?;
            self.collapsed += 1;
            self.next += 1;
        }
        Ok(())
    }
}

impl Source for SortedRun {
    #[inline]
    fn record(&self) -> Option<RecordRef<'_>> {
        if let Some(span) = self.current {
            return Some(span.record(&self.root.arena));
        }
        // Folded versions, or nothing left.
        let kind = self.folded.kind()?;
        Some(RecordRef {
            hash: self.order[self.next - 1].0,
            kind,
            key: &self.key,
            value: self.folded.value(),
        })
    }

    fn advance(&mut self) -> Result<()> {
        self.current = None;
        self.folded.clear();
        if self.next >= self.end {
            return Ok(());
        }
        // Records lie all over the arena: ask for one further ahead, so
        // its cache miss overlaps with this record's work.
        if let Some(&(_, ahead)) = self.order.get(self.next + READ_AHEAD) {
            prefetch(&self.root.arena[ahead as usize]);
        }
        let (hash, offset) = self.order[self.next];
        self.next += 1;
        let record = self.root.record_at(hash, offset);
        // Older versions of a key come first among the records of its hash.
        let repeated = self.order[..self.end]
            .get(self.next)
            .is_some_and(|&(next, at)| next == hash && self.root.record_at(next, at).key == record.key);
        if repeated {
            return self.fold_versions(hash, offset);
        }
        self.current = Some(RecordSpan::of(&record, &self.root.arena));
        Ok(())
    }

    fn collapsed(&self) -> u64 {
        self.collapsed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collapse::Interleaver;

    fn versions(root: &RootBuffer, hash: Hash64, key: &[u8]) -> Vec<(Kind, Vec<u8>)> {
        let mut found = Vec::new();
        root.get(hash, key, |kind, value| {
            found.push((kind, value.to_vec()));
            true
        });
        found
    }

    #[test]
    fn gets_find_every_version_newest_first_and_tell_colliding_keys_apart() {
        let mut root = RootBuffer::new();
        for i in 0..5000u64 {
            root.insert(i * 7, Kind::Put, &i.to_le_bytes(), b"v");
        }
        root.insert(14, Kind::Put, b"other key, same hash", b"x");
        root.insert(14, Kind::Delete, &2u64.to_le_bytes(), b"");
        root.insert(14, Kind::Put, &2u64.to_le_bytes(), b"again");
        assert_eq!(root.len(), 5003);
        assert_eq!(
            versions(&root, 14, &2u64.to_le_bytes()),
            vec![
                (Kind::Put, b"again".to_vec()),
                (Kind::Delete, Vec::new()),
                (Kind::Put, b"v".to_vec())
            ]
        );
        assert_eq!(
            versions(&root, 14, b"other key, same hash"),
            vec![(Kind::Put, b"x".to_vec())]
        );
        assert!(versions(&root, 15, b"absent").is_empty());
        assert_eq!(versions(&root, 4999 * 7, &4999u64.to_le_bytes()).len(), 1);
        assert!(root.bytes() >= root.arena.len() + 5003 * 12);

        // Hashes that share their upper half share a slot and a chain, yet
        // keep their own hash: a GET of one never sees the other, and the
        // sorted order puts each at its whole hash. (The hashes above, all
        // under 2^32, share one chain too.)
        let (high, low_a, low_b) = (9u64 << 32, 14u64, 3u64);
        root.insert(high | low_a, Kind::Put, b"shared key", b"a");
        root.insert(high | low_b, Kind::Put, b"shared key", b"b");
        assert_eq!(
            versions(&root, high | low_a, b"shared key"),
            vec![(Kind::Put, b"a".to_vec())]
        );
        assert_eq!(
            versions(&root, high | low_b, b"shared key"),
            vec![(Kind::Put, b"b".to_vec())]
        );
        let order = root.sorted();
        assert_eq!(order.len(), root.len());
        assert!(order.windows(2).all(|pair| pair[0].0 <= pair[1].0));
        for hash in [low_a, high | low_b, high | low_a] {
            assert!(order.iter().any(|&(sorted, _)| sorted == hash), "{hash:#x}");
        }
    }

    #[test]
    fn a_batch_that_would_grow_the_table_counts_the_grown_table() {
        let mut root = RootBuffer::new();
        let slots = root.table.len();
        let mut batch = WriteBatch::new();
        for i in 0..(slots * 3 / 4) as u64 {
            batch.put(&i.to_le_bytes(), b"v");
        }
        let before = root.bytes_with(batch.len(), batch.data_bytes());
        root.insert_batch(&batch);
        assert_eq!(root.bytes(), before, "bytes_with foretold the root's size");
        assert_eq!(root.table.len(), slots, "three quarters full, not grown");
        let mut one = WriteBatch::new();
        one.put(b"one more", b"v");
        let grown = root.bytes_with(1, one.data_bytes());
        assert!(
            grown >= root.bytes() + slots * size_of::<Slot>(),
            "the doubled table counts"
        );
        root.insert_batch(&one);
        assert_eq!(root.bytes(), grown);
        assert_eq!(root.table.len(), slots * 2);
        for i in 0..(slots * 3 / 4) as u64 {
            let key = i.to_le_bytes();
            assert_eq!(versions(&root, spillway_core::hash64(&key), &key).len(), 1);
        }
    }

    #[test]
    fn nearly_sorted_pairs_and_unsorted_ones_sort_as_a_comparison_sort_does() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut random = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        // In order but for pairs moved a few places, and some hashes repeated.
        let mut nearly: SortedOrder = (0..50_000u32)
            .map(|offset| (u64::from(offset / 3) << 20, offset))
            .collect();
        for _ in 0..5000 {
            let at = random() as usize % (nearly.len() - 8);
            nearly.swap(at, at + 1 + random() as usize % 7);
        }
        // Out of order throughout: past the insertion sort's budget.
        let shuffled: SortedOrder = (0..50_000u32).map(|offset| (random() & 0xffff, offset)).collect();
        for mut order in [nearly, shuffled] {
            let mut expected = order.clone();
            expected.sort_unstable();
            sort_nearly_sorted(&mut order);
            assert_eq!(order, expected);
        }
    }

    #[test]
    fn a_full_root_of_random_hashes_sorts_with_the_slots_probed_round_the_end() {
        let mut root = RootBuffer::new();
        let mut batch = WriteBatch::new();
        for i in 0..200_000u64 {
            batch.put(&i.to_le_bytes(), b"v");
            if batch.len() == 1000 {
                root.insert_batch(&batch);
                batch.clear();
            }
        }
        root.insert(u64::MAX, Kind::Put, b"last", b"x");
        root.insert(u64::MAX - 1, Kind::Put, b"next to last", b"x");
        let last = root.table.len() - 1;
        assert!(
            root.table[0].head != 0 && root.table[last].head != 0,
            "slots at both ends are taken"
        );
        let order = root.sorted();
        let mut expected: SortedOrder = (0..root.entries.len())
            .map(|number| {
                let entry = root.entries[number];
                let record = root.record_at(0, entry.offset);
                (record.key.to_vec(), entry.offset)
            })
            .map(|(key, offset)| {
                let hash = match key.as_slice() {
                    b"last" => u64::MAX,
                    b"next to last" => u64::MAX - 1,
                    key => spillway_core::hash64(key),
                };
                (hash, offset)
            })
            .collect();
        expected.sort_unstable();
        assert_eq!(order, expected);
    }

    #[test]
    fn a_sorted_run_collapses_to_one_record_per_key_in_hash_then_key_order() {
        let mut root = RootBuffer::new();
        root.insert(9, Kind::Put, b"b", b"1");
        root.insert(3, Kind::Put, b"a", b"1");
        root.insert(9, Kind::Put, b"a", b"1");
        root.insert(9, Kind::Put, b"b", b"2");
        root.insert(3, Kind::Delete, b"a", b"");
        let root = Arc::new(root);
        let order = Arc::new(root.sorted());
        assert_eq!(order.len(), 5);
        let run = SortedRun::new(root.clone(), order.clone(), 0, u64::MAX, None);
        let mut interleaver = Interleaver::new(vec![Box::new(run)], None).unwrap();
        let mut out = Vec::new();
        while let Some(record) = interleaver.next_record().unwrap() {
            out.push((
                record.hash,
                record.kind,
                record.key.to_vec(),
                record.value.to_vec(),
            ));
        }
        assert_eq!(
            out,
            vec![
                (3, Kind::Delete, b"a".to_vec(), Vec::new()),
                (9, Kind::Put, b"a".to_vec(), b"1".to_vec()),
                (9, Kind::Put, b"b".to_vec(), b"2".to_vec()),
            ]
        );
        let part = SortedRun::new(root, order, 4, 9, None);
        let mut interleaver = Interleaver::new(vec![Box::new(part)], None).unwrap();
        let mut count = 0;
        while interleaver.next_record().unwrap().is_some() {
            count += 1;
        }
        assert_eq!(count, 2);
    }

    #[test]
    fn a_sorted_run_folds_a_keys_merge_operands_and_counts_every_version() {
        let sum = Arc::new(crate::merge::AggregateMerge::new("sum").unwrap());
        let operand = |amount: i64| sum.operand(spillway_agg::Value::Int(amount)).unwrap();
        let mut root = RootBuffer::new();
        root.insert(5, Kind::Merge, b"k", &operand(2));
        root.insert(7, Kind::Put, b"other", b"x");
        root.insert(5, Kind::Merge, b"k", &operand(3));
        root.insert(5, Kind::Merge, b"k", &operand(4));
        let root = Arc::new(root);
        let order = Arc::new(root.sorted());
        let merge: Arc<dyn MergeOperator> = sum.clone();
        let run = SortedRun::new(root, order, 0, u64::MAX, Some(merge.clone()));
        let mut interleaver = Interleaver::new(vec![Box::new(run)], Some(merge)).unwrap();
        let first = interleaver.next_record().unwrap().unwrap();
        assert_eq!((first.hash, first.kind, first.key), (5, Kind::Merge, &b"k"[..]));
        assert_eq!(sum.finalize(first.value).unwrap(), spillway_agg::Output::Int(9));
        let second = interleaver.next_record().unwrap().unwrap();
        assert_eq!(
            (second.hash, second.key, second.value),
            (7, &b"other"[..], &b"x"[..])
        );
        assert!(interleaver.next_record().unwrap().is_none());
        assert_eq!(interleaver.records_in(), 4, "every version read is counted");
    }
}
