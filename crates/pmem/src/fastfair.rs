//! The sorted-leaf baseline the B3-tree is measured against (seed 002
//! §4.3): a persistent B+-tree in the manner of FAST&FAIR, whose nodes
//! keep their records in a sorted array changed in place, on the same
//! region and [`Persist`] primitive as the B3-tree.
//!
//! - **FAST** (failure-atomic shift): an insert shifts the records above
//!   its place one slot right, from the last down, one 8-byte store at a
//!   time, and writes its record into the gap; a removal shifts left. Every
//!   store leaves the array readable: a record seen twice in a row is a
//!   shift under way and the right copy is the true one (so keys read in
//!   order never decrease, and a search takes the last equal key). The
//!   stores run through a node's lines one line at a time, and a line is
//!   flushed and fenced before the next is written: since stores to one
//!   line persist in order, every crash leaves a prefix of the stores.
//!   This is the baseline's cost: a flush per line the shift crosses.
//! - **FAIR** (failure-atomic in-place rebalance): a full node copies its
//!   upper half into a new right sibling, links it (the commit: one store
//!   of the sibling word), sets its high key, ends its own array at the
//!   half, and then the parent gets the separator. Until the parent has
//!   it, searches reach the new node by moving right (B-link).
//!
//! A node is a heap block of `bytes` (a power of two). Its first line is
//! the header; records of 16 bytes follow, (key, value) in a leaf and
//! (key, child) in an internal node, where child `i` holds the keys from
//! key `i` up to key `i + 1` and the header's leftmost child those below
//! key 0:
//!
//! | bytes | header field |
//! |---|---|
//! | 0..8 | meta: `0xFF` in the top byte, the level (0: a leaf) in the low byte |
//! | 8..16 | the right sibling node (0: none) |
//! | 16..24 | the high key: keys from it up live in the sibling (when there is one) |
//! | 24..32 | the low key: the node holds keys from it up |
//! | 32..40 | the leftmost child (an internal node's) |
//!
//! The array ends at the first record whose value word is [`END`] (or at
//! the node's capacity): a value the baseline does not store. Records past
//! the end are leftovers and are never read.
//!
//! It departs from the published FAST&FAIR where the notes list its bugs:
//! the root split publishes the new root with one store of the root word;
//! the high key is written in the order that keeps every state right
//! (below); no value doubles as a null (the end mark is a value refused on
//! insert, not 0); and a recovery after a crash completes what a split or
//! shift left undone. It does not merge sparse nodes (nor does the
//! published code, soundly): the comparison is of inserts, searches,
//! removals and scans.

use std::collections::HashSet;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use spillway_core::{ensure, Error, Result};

use crate::heap::Heap;
use crate::persist::{line_of, Persist};
use crate::record::Keys;
use crate::region::{Region, LINE};
use crate::treeroot::{self, Options, RootObject, TreeStats};

/// The region kind of the sorted-leaf baseline.
pub const KIND: &str = "fastfair";

/// The root object's magic.
const MAGIC: u64 = u64::from_le_bytes(*b"FASTFAIR");

/// Bytes per node unless told otherwise: FAST&FAIR's own 512 (eight
/// lines), the size it is measured at.
pub const NODE_BYTES: u64 = 512;

/// The value word that ends a node's records: a value the tree refuses.
pub const END: u64 = u64::MAX;

const META: u64 = 0;
const SIBLING: u64 = 8;
const HIGH: u64 = 16;
const LOW: u64 = 24;
const LEFTMOST: u64 = 32;

/// Lines [`Node::prefetch`] asks for, as many as the B3-tree's pages get.
const PREFETCH_LINES: u64 = 16;

/// Bytes of a record.
const RECORD: u64 = 16;

/// The meta word's top byte, telling a node from anything else.
const TAG: u64 = 0xFF << 56;

/// A node's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    level: u8,
    sibling: u64,
    high: u64,
    low: u64,
    leftmost: u64,
}

impl Header {
    /// Whether `key` lives right of the node (past its high key).
    fn right_of(&self, key: u64) -> bool {
        self.sibling != 0 && key >= self.high
    }
}

/// A node: a block at `at` of `bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Node {
    at: u64,
    bytes: u64,
}

impl Node {
    fn capacity(self) -> u32 {
        ((self.bytes - LINE) / RECORD) as u32
    }

    fn key_at(self, slot: u32) -> u64 {
        self.at + LINE + RECORD * u64::from(slot)
    }

    fn value_at(self, slot: u32) -> u64 {
        self.key_at(slot) + 8
    }

    fn word(self, region: &Region, at: u64) -> u64 {
        region.word(at).load(Ordering::Acquire)
    }

    /// The record in `slot`.
    fn record(self, region: &Region, slot: u32) -> (u64, u64) {
        (
            self.word(region, self.key_at(slot)),
            self.word(region, self.value_at(slot)),
        )
    }

    fn corrupt(self, region: &Region, at: u64, what: String) -> Error {
        Error::corruption(region.path(), at, format!("sorted-leaf node {}: {what}", self.at))
    }

    /// Asks memory for the node's first lines at once (all of a 512-byte
    /// node's), which its linear search reads in turn: the courtesy the
    /// B3-tree's pages get (see `Page::prefetch`), so that the two compare
    /// on equal terms.
    fn prefetch(self, region: &Region) {
        for line in 0..(self.bytes / LINE).min(PREFETCH_LINES) {
            region.prefetch(self.at + LINE * line);
        }
    }

    /// The header, its tag checked.
    fn header(self, region: &Region) -> Result<Header> {
        let meta = self.word(region, self.at + META);
        if meta & (0xff << 56) != TAG {
            return Err(self.corrupt(region, self.at, format!("no node tag in its meta word {meta:#x}")));
        }
        Ok(Header {
            level: (meta & 0xff) as u8,
            sibling: self.word(region, self.at + SIBLING),
            high: self.word(region, self.at + HIGH),
            low: self.word(region, self.at + LOW),
            leftmost: self.word(region, self.at + LEFTMOST),
        })
    }

    /// Records in the array, a shift's second copy included.
    fn len(self, region: &Region) -> u32 {
        (0..self.capacity())
            .find(|&slot| self.word(region, self.value_at(slot)) == END)
            .unwrap_or(self.capacity())
    }

    /// The last slot holding `key` (the true copy), if any: a linear scan,
    /// as FAST&FAIR's, which stops at the first greater key.
    fn find(self, region: &Region, key: u64) -> Option<u32> {
        let mut found = None;
        for slot in 0..self.capacity() {
            let (k, value) = self.record(region, slot);
            if value == END || k > key {
                break;
            }
            if k == key {
                found = Some(slot);
            }
        }
        found
    }

    /// The child of an internal node that holds `key`: the last record's
    /// whose key is at most `key`, else the leftmost.
    fn child_for(self, region: &Region, header: &Header, key: u64) -> u64 {
        let mut child = header.leftmost;
        for slot in 0..self.capacity() {
            let (k, value) = self.record(region, slot);
            if value == END || k > key {
                break;
            }
            child = value;
        }
        child
    }

    /// The records below `high` (all, when `high` is `None`), each once
    /// (its true copy), in key order.
    fn records(self, region: &Region, high: Option<u64>) -> Vec<(u64, u64)> {
        let mut records = Vec::new();
        self.each(region, high, |key, value| {
            records.push((key, value));
            true
        });
        records
    }

    /// Visits the records below `high` (all, when `high` is `None`), each
    /// once (its true copy: the last of a run of equal keys), in key
    /// order, while `visit` returns true; returns false if it stopped.
    fn each(self, region: &Region, high: Option<u64>, mut visit: impl FnMut(u64, u64) -> bool) -> bool {
        let len = self.len(region);
        for slot in 0..len {
            let (key, value) = self.record(region, slot);
            if high.is_some_and(|high| key >= high) {
                break;
            }
            let next = (slot + 1 < len).then(|| self.word(region, self.key_at(slot + 1)));
            if next != Some(key) && !visit(key, value) {
                return false;
            }
        }
        true
    }

    /// Inserts `(key, value)` at `slot` of an array of `len` records (less
    /// than the capacity): the FAST shift, a line at a time.
    fn shift_in(
        self,
        region: &Region,
        persist: &impl Persist,
        len: u32,
        slot: u32,
        (key, value): (u64, u64),
    ) {
        debug_assert!(slot <= len && len < self.capacity());
        let mut lines = Lines::new(region, persist);
        // A leftover record after the new end would join the array.
        if len + 1 < self.capacity() && self.word(region, self.value_at(len + 1)) != END {
            lines.store(self.value_at(len + 1), END);
        }
        for to in (slot..=len).rev() {
            let record = if to == slot {
                (key, value)
            } else {
                self.record(region, to - 1)
            };
            if to == len {
                // The end mark's slot: its key first, while it still ends
                // the array, then its value, which extends it.
                lines.store(self.key_at(to), record.0);
                lines.store(self.value_at(to), record.1);
            } else {
                // A slot whose record is copied right already: its value
                // first (its key then shows twice, the right copy true),
                // then its key.
                lines.store(self.value_at(to), record.1);
                lines.store(self.key_at(to), record.0);
            }
        }
        lines.finish();
    }

    /// Removes the record at `slot` of an array of `len` records: the FAST
    /// shift left, a line at a time. The first store (the next record's key
    /// over the removed one's) removes it.
    fn shift_out(self, region: &Region, persist: &impl Persist, len: u32, slot: u32) {
        debug_assert!(slot < len);
        let mut lines = Lines::new(region, persist);
        for to in slot..len - 1 {
            let (key, value) = self.record(region, to + 1);
            lines.store(self.key_at(to), key);
            lines.store(self.value_at(to), value);
        }
        lines.store(self.value_at(len - 1), END);
        lines.finish();
    }

    /// Writes a node at `at` (a block no reader reaches yet) holding
    /// `records` (sorted, distinct keys), every line whole and flushed; the
    /// caller fences before it publishes the node.
    fn build(region: &Region, persist: &impl Persist, node: Node, header: Header, records: &[(u64, u64)]) {
        assert!(
            records.len() <= node.capacity() as usize,
            "more records than a node holds"
        );
        let mut words = vec![0u64; (node.bytes / 8) as usize];
        words[..5].copy_from_slice(&[
            TAG | u64::from(header.level),
            header.sibling,
            header.high,
            header.low,
            header.leftmost,
        ]);
        for slot in 0..node.capacity() as usize {
            let (key, value) = records.get(slot).copied().unwrap_or((0, END));
            words[8 + 2 * slot] = key;
            words[9 + 2 * slot] = value;
        }
        let lines: Vec<(u64, [u8; LINE as usize])> = words
            .chunks(8)
            .enumerate()
            .map(|(i, line)| {
                let mut bytes = [0u8; LINE as usize];
                for (w, word) in line.iter().enumerate() {
                    bytes[8 * w..8 * w + 8].copy_from_slice(&word.to_le_bytes());
                }
                (LINE * i as u64, bytes)
            })
            .collect();
        persist.write_lines(region, node.at, &lines);
    }
}

/// Stores to a node's lines, one line at a time: a line is flushed and
/// fenced before a store to another, so that a crash persists a prefix of
/// the stores (stores to one line persist in order).
struct Lines<'a, P: Persist> {
    region: &'a Region,
    persist: &'a P,
    line: Option<u64>,
}

impl<'a, P: Persist> Lines<'a, P> {
    fn new(region: &'a Region, persist: &'a P) -> Lines<'a, P> {
        Lines {
            region,
            persist,
            line: None,
        }
    }

    fn store(&mut self, at: u64, value: u64) {
        if self.line.is_some_and(|line| line != line_of(at)) {
            self.finish();
        }
        self.line = Some(line_of(at));
        self.persist.store(self.region, at, value);
    }

    fn finish(&mut self) {
        if let Some(line) = self.line.take() {
            self.persist.flush(self.region, line * LINE, LINE);
            self.persist.fence();
        }
    }
}

/// The sorted-leaf baseline on a region; one operation at a time.
#[derive(Debug)]
pub struct FastFair<P: Persist> {
    region: Region,
    heap: Heap,
    persist: P,
    root: RootObject,
    turn: Mutex<()>,
    /// Splits since the open (for the statistics).
    splits: AtomicU64,
}

impl<P: Persist> FastFair<P> {
    /// Creates a tree in a new region file at `path` (`page_bytes` is the
    /// node's size).
    pub fn create(path: &Path, options: Options, persist: P) -> Result<FastFair<P>> {
        treeroot::check(&options)?;
        FastFair::format(
            Region::create(path, options.region_bytes, KIND)?,
            options,
            persist,
        )
    }

    /// Creates a tree in memory (tests, the crash tester).
    pub fn in_memory(options: Options, persist: P) -> Result<FastFair<P>> {
        treeroot::check(&options)?;
        FastFair::format(Region::in_memory(options.region_bytes, KIND)?, options, persist)
    }

    /// Opens the tree in the region file at `path`, recovering it.
    pub fn open(path: &Path, persist: P) -> Result<FastFair<P>> {
        FastFair::attach(Region::open(path, KIND)?, persist)
    }

    fn format(region: Region, options: Options, persist: P) -> Result<FastFair<P>> {
        ensure!(
            options.keys == Keys::U64,
            InvalidArgument,
            "the sorted-leaf baseline maps u64 keys only, not {}",
            options.keys.name()
        );
        let (heap, root) = RootObject::format(&region, &persist, MAGIC, &options, |at| {
            let header = Header {
                level: 0,
                sibling: 0,
                high: 0,
                low: 0,
                leftmost: 0,
            };
            let node = Node {
                at,
                bytes: options.page_bytes,
            };
            Node::build(&region, &persist, node, header, &[]);
        })?;
        Ok(FastFair {
            region,
            heap,
            persist,
            root,
            turn: Mutex::new(()),
            splits: AtomicU64::new(0),
        })
    }

    /// Opens the tree held by `region` and, unless it was closed clean,
    /// recovers it (see `recover`).
    pub fn attach(region: Region, persist: P) -> Result<FastFair<P>> {
        let (heap, root, dirty) = RootObject::open(&region, &persist, MAGIC, "sorted-leaf tree")?;
        if root.keys != Keys::U64 {
            return Err(Error::corruption(
                region.path(),
                root.at,
                "a sorted-leaf tree of bytes keys",
            ));
        }
        let tree = FastFair {
            region,
            heap,
            persist,
            root,
            turn: Mutex::new(()),
            splits: AtomicU64::new(0),
        };
        if dirty {
            tree.recover()?;
        } else {
            tree.node(tree.root_node()).header(&tree.region)?;
        }
        Ok(tree)
    }

    /// Marks the tree closed and makes its file durable.
    pub fn close(self) -> Result<()> {
        self.heap.close(&self.region, &self.persist);
        self.region.sync()
    }

    /// Persistence counts and shape.
    pub fn stats(&self) -> Result<TreeStats> {
        let _turn = self.turn();
        let root = self.node(self.root_node()).header(&self.region)?;
        Ok(self.root.stats(
            &self.region,
            &self.persist,
            root.level,
            [self.splits.load(Ordering::Relaxed), 0, 0, 0],
        ))
    }

    /// The persistence mode (its counts; a trace).
    pub fn persist(&self) -> &P {
        &self.persist
    }

    /// The region (for images and statistics).
    pub fn region(&self) -> &Region {
        &self.region
    }

    fn turn(&self) -> MutexGuard<'_, ()> {
        self.turn.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn node(&self, at: u64) -> Node {
        Node {
            at,
            bytes: self.root.page_bytes,
        }
    }

    fn root_node(&self) -> u64 {
        self.root.page(&self.region)
    }

    /// The node of `level` that holds `key`, and the internal nodes the
    /// descent left through a child link (the last leads to it, perhaps
    /// through right moves).
    fn descend(&self, key: u64, level: u8) -> Result<(Node, Header, Vec<u64>)> {
        let mut path = Vec::new();
        let (node, header) = self.walk(key, level, Some(&mut path))?;
        Ok((node, header, path))
    }

    /// The node of `level` that holds `key` and its header, noting in
    /// `path` (a write's) the internal nodes left through a child link: a
    /// search notes none and allocates nothing.
    fn walk(&self, key: u64, level: u8, mut path: Option<&mut Vec<u64>>) -> Result<(Node, Header)> {
        let mut at = self.root_node();
        for _ in 0..=self.region.len() / self.root.page_bytes {
            let node = self.node(at);
            node.prefetch(&self.region);
            let header = node.header(&self.region)?;
            if header.right_of(key) {
                at = header.sibling;
                continue;
            }
            if header.level <= level {
                return Ok((node, header));
            }
            if let Some(path) = path.as_deref_mut() {
                path.push(at);
            }
            at = node.child_for(&self.region, &header, key);
        }
        Err(Error::corruption(
            self.region.path(),
            at,
            "a sorted-leaf tree descent that never ends",
        ))
    }

    /// The value of `key`.
    pub fn get(&self, key: u64) -> Result<Option<u64>> {
        let _turn = self.turn();
        let (leaf, _) = self.walk(key, 0, None)?;
        Ok(leaf
            .find(&self.region, key)
            .map(|slot| leaf.record(&self.region, slot).1))
    }

    /// Sets `key` to `value` (any but [`END`]); returns the value it
    /// replaced.
    pub fn insert(&self, key: u64, value: u64) -> Result<Option<u64>> {
        ensure!(
            value != END,
            InvalidArgument,
            "the sorted-leaf tree cannot store the value {END:#x} (it ends a node's records)"
        );
        let _turn = self.turn();
        loop {
            let (leaf, header, path) = self.descend(key, 0)?;
            if let Some(slot) = leaf.find(&self.region, key) {
                let (_, old) = leaf.record(&self.region, slot);
                self.persist
                    .persist_word(&self.region, leaf.value_at(slot), value);
                return Ok(Some(old));
            }
            if self.place(leaf, &header, &path, (key, value))? {
                return Ok(None);
            }
        }
    }

    /// Puts `record` into `node` (whose header is `header`, reached through
    /// `path`): shifted in, or, in a full node, after a split. Returns false
    /// when a full parent was split first: the caller descends again.
    fn place(&self, node: Node, header: &Header, path: &[u64], record: (u64, u64)) -> Result<bool> {
        let len = node.len(&self.region);
        if len < node.capacity() {
            let slot = (0..len)
                .find(|&slot| node.record(&self.region, slot).0 > record.0)
                .unwrap_or(len);
            node.shift_in(&self.region, &self.persist, len, slot, record);
            return Ok(true);
        }
        let Some(separator) = self.split(node, header, path)? else {
            return Ok(false);
        };
        let half = if record.0 < separator {
            node
        } else {
            self.node(node.header(&self.region)?.sibling)
        };
        let len = half.len(&self.region);
        ensure!(
            len < half.capacity(),
            Internal,
            "sorted-leaf node {}: full after its split",
            half.at
        );
        let slot = (0..len)
            .find(|&slot| half.record(&self.region, slot).0 > record.0)
            .unwrap_or(len);
        half.shift_in(&self.region, &self.persist, len, slot, record);
        Ok(true)
    }

    /// FAIR: splits `node` (reached through `path`) into itself and a new
    /// right sibling; returns the separator. A full parent is split first
    /// (or its own parent), and then `None` says that `node` was not: the
    /// caller descends again.
    fn split(&self, node: Node, header: &Header, path: &[u64]) -> Result<Option<u64>> {
        if let Some((&parent, above)) = path.split_last() {
            let parent = self.node(parent);
            if parent.len(&self.region) == parent.capacity() {
                let parent_header = parent.header(&self.region)?;
                self.split(parent, &parent_header, above)?;
                return Ok(None);
            }
        }
        self.splits.fetch_add(1, Ordering::Relaxed);
        let records = node.records(&self.region, header.sibling.ne(&0).then_some(header.high));
        ensure!(
            records.len() >= 2,
            Internal,
            "sorted-leaf node {}: a split of fewer than two records",
            node.at
        );
        let mid = records.len() / 2;
        let separator = records[mid].0;
        // A leaf's upper half moves; an internal node's middle record's
        // child becomes the new node's leftmost, its key the separator.
        let (leftmost, moved) = if header.level == 0 {
            (0, &records[mid..])
        } else {
            (records[mid].1, &records[mid + 1..])
        };
        let right = self.node(
            self.heap
                .alloc(&self.region, &self.persist, self.root.page_bytes)?,
        );
        let right_header = Header {
            level: header.level,
            sibling: header.sibling,
            high: header.high,
            low: separator,
            leftmost,
        };
        Node::build(&self.region, &self.persist, right, right_header, moved);
        self.persist.fence();
        self.link(node, header, right.at, separator);
        // The array ends at the separator's slot (its first copy).
        let end = (0..node.len(&self.region))
            .find(|&slot| node.record(&self.region, slot).0 >= separator)
            .expect("the separator is in the node");
        self.persist.persist_word(&self.region, node.value_at(end), END);
        match path.last() {
            None => self.grow(node, header.level, separator, right.at)?,
            Some(&parent) => {
                let parent = self.node(parent);
                let parent_header = parent.header(&self.region)?;
                let placed = self.place(parent, &parent_header, &[], (separator, right.at))?;
                ensure!(
                    placed,
                    Internal,
                    "sorted-leaf node {}: no room for a separator",
                    parent.at
                );
            }
        }
        Ok(Some(separator))
    }

    /// The commit of a split: `node`'s sibling becomes `right` and its high
    /// key `separator`, both in its header line (which persists them in
    /// order). A node with a sibling links first: until its high key
    /// changes, the keys from the separator up are still found in it, and
    /// the others move right twice. A node without one sets its high key
    /// first, unread while there is no sibling.
    fn link(&self, node: Node, header: &Header, right: u64, separator: u64) {
        let (region, persist) = (&self.region, &self.persist);
        if header.sibling != 0 {
            persist.store(region, node.at + SIBLING, right);
            persist.store(region, node.at + HIGH, separator);
        } else {
            persist.store(region, node.at + HIGH, separator);
            persist.store(region, node.at + SIBLING, right);
        }
        persist.flush(region, node.at, LINE);
        persist.fence();
    }

    /// A root split: a new root over `left` and `right`, published by one
    /// store of the root word.
    fn grow(&self, left: Node, level: u8, separator: u64, right: u64) -> Result<()> {
        ensure!(
            self.root_node() == left.at,
            Internal,
            "the sorted-leaf tree's root moved under a split"
        );
        let root = self.node(
            self.heap
                .alloc(&self.region, &self.persist, self.root.page_bytes)?,
        );
        let header = Header {
            level: level + 1,
            sibling: 0,
            high: 0,
            low: 0,
            leftmost: left.at,
        };
        Node::build(&self.region, &self.persist, root, header, &[(separator, right)]);
        self.persist.fence();
        self.root.set_page(&self.region, &self.persist, root.at);
        Ok(())
    }

    /// Removes `key`; returns its value.
    pub fn remove(&self, key: u64) -> Result<Option<u64>> {
        let _turn = self.turn();
        let (leaf, _) = self.walk(key, 0, None)?;
        let Some(slot) = leaf.find(&self.region, key) else {
            return Ok(None);
        };
        let (_, value) = leaf.record(&self.region, slot);
        leaf.shift_out(&self.region, &self.persist, leaf.len(&self.region), slot);
        Ok(Some(value))
    }

    /// Every (key, value) in key order.
    pub fn entries(&self) -> Result<Vec<(u64, u64)>> {
        self.range(.., usize::MAX)
    }

    /// Its keys (a scan of the leaves).
    pub fn len(&self) -> Result<usize> {
        self.entries().map(|entries| entries.len())
    }

    /// Whether it holds no key.
    pub fn is_empty(&self) -> Result<bool> {
        self.range(.., 1).map(|first| first.is_empty())
    }

    /// The (key, value) pairs with keys in `keys`, in key order, at most
    /// `limit` of them.
    pub fn range(&self, keys: impl RangeBounds<u64>, limit: usize) -> Result<Vec<(u64, u64)>> {
        self.scan(keys, limit, true)
    }

    /// As [`range`](Self::range), in reverse key order from the range's
    /// end: each node left of the last found by a descent to the key below
    /// its low key.
    pub fn range_rev(&self, keys: impl RangeBounds<u64>, limit: usize) -> Result<Vec<(u64, u64)>> {
        self.scan(keys, limit, false)
    }

    fn scan(&self, keys: impl RangeBounds<u64>, limit: usize, forward: bool) -> Result<Vec<(u64, u64)>> {
        let _turn = self.turn();
        let bound = if forward {
            treeroot::first_key(&keys)
        } else {
            treeroot::last_key(&keys)
        };
        let Some(bound) = bound else {
            return Ok(Vec::new());
        };
        let (mut leaf, mut header) = self.walk(bound, 0, None)?;
        let mut pairs = Vec::new();
        loop {
            let end = (header.sibling != 0).then_some(header.high);
            let mut take = |key: u64, value: u64| {
                // (Keys before the bound, in the scan's order, are passed.)
                if (forward && key < bound) || (!forward && key > bound) {
                    return true;
                }
                let more = keys.contains(&key) && pairs.len() < limit;
                if more {
                    pairs.push((key, value));
                }
                more
            };
            let more = if forward {
                leaf.each(&self.region, end, take)
            } else {
                leaf.records(&self.region, end)
                    .into_iter()
                    .rev()
                    .all(|(key, value)| take(key, value))
            };
            match (more, forward) {
                (true, true) if header.sibling != 0 => {
                    leaf = self.node(header.sibling);
                    leaf.prefetch(&self.region);
                    header = leaf.header(&self.region)?;
                }
                // (Only a level's leftmost node has the low key 0.)
                (true, false) if header.low != 0 => (leaf, header) = self.walk(header.low - 1, 0, None)?,
                _ => return Ok(pairs),
            }
        }
    }

    /// Checks the invariants: each node's level is one below its parent's,
    /// its low key the one its parent's link starts at and its high key
    /// (with a sibling) the one the link ends at; its keys distinct, in
    /// order and inside that range, its array no copy of a record twice.
    pub fn verify(&self) -> Result<()> {
        let _turn = self.turn();
        let mut stack = vec![(self.root_node(), None, 0, None)];
        while let Some((at, level, low, high)) = stack.pop() {
            let node = self.node(at);
            let bad = |what: String| Err(node.corrupt(&self.region, at, what));
            let header = node.header(&self.region)?;
            let ends = (header.sibling != 0).then_some(header.high);
            if level.is_some_and(|level| header.level != level)
                || (level.is_some() && header.low != low)
                || ends != high
            {
                return bad(format!(
                    "level {}, keys from {} to {ends:?}, where its parent leads keys from {low} to {high:?} at level {level:?}",
                    header.level, header.low
                ));
            }
            let records: Vec<(u64, u64)> = (0..node.len(&self.region))
                .map(|slot| node.record(&self.region, slot))
                .collect();
            let inside = |key: u64| key >= low && high.is_none_or(|high| key < high);
            if !records.iter().all(|&(key, _)| inside(key)) {
                return bad(format!("keys outside {low}..{high:?}"));
            }
            if !records.windows(2).all(|pair| pair[0].0 < pair[1].0) {
                return bad("keys not strictly increasing".into());
            }
            if header.level > 0 {
                let mut from = low;
                let mut child = header.leftmost;
                for &(key, next) in &records {
                    stack.push((child, Some(header.level - 1), from, Some(key)));
                    (from, child) = (key, next);
                }
                stack.push((child, Some(header.level - 1), from, high));
            }
        }
        Ok(())
    }

    /// Completes what a crash left undone, level by level from the leaves
    /// (each level's nodes found along its sibling links, from its
    /// leftmost): a high key not yet set, an array not yet ended at its
    /// split, a record left twice by a shift, a separator the parent level
    /// lacks (a split cut short: the new root, at the top); then frees the
    /// blocks no node reaches. Every step is a store the operations make,
    /// so a crash during recovery is recovered the same way.
    fn recover(&self) -> Result<()> {
        let _turn = self.turn();
        for level in 0..=self.node(self.root_node()).header(&self.region)?.level {
            for at in self.level_nodes(level)? {
                self.tidy(self.node(at))?;
            }
        }
        let mut level = 0;
        loop {
            let nodes = self.level_nodes(level)?;
            if nodes[0] == self.root_node() {
                if nodes.len() == 1 {
                    break;
                }
                // A root split cut short: the new root over the level.
                let node = self.node(nodes[0]);
                let header = node.header(&self.region)?;
                self.grow(node, level, header.high, header.sibling)?;
                continue;
            }
            // Every node but the leftmost needs its separator one level up.
            let mut linked = HashSet::new();
            for at in self.level_nodes(level + 1)? {
                let parent = self.node(at);
                linked.insert(parent.header(&self.region)?.leftmost);
                linked.extend(
                    parent
                        .records(&self.region, None)
                        .into_iter()
                        .map(|(_, child)| child),
                );
            }
            for &at in &nodes[1..] {
                if linked.contains(&at) {
                    continue;
                }
                let low = self.node(at).header(&self.region)?.low;
                loop {
                    let (parent, header, path) = self.descend(low, level + 1)?;
                    if self.place(parent, &header, &path, (low, at))? {
                        break;
                    }
                }
            }
            level += 1;
        }
        let mut reached: HashSet<u64> = [self.root.at].into();
        for level in 0..=self.node(self.root_node()).header(&self.region)?.level {
            reached.extend(self.level_nodes(level)?);
        }
        self.heap.recover(&self.region, &self.persist, &reached)
    }

    /// The nodes of `level`, left to right: from the leftmost (reached by
    /// leftmost children from the root) along sibling links.
    fn level_nodes(&self, level: u8) -> Result<Vec<u64>> {
        let mut at = self.root_node();
        loop {
            let node = self.node(at);
            let header = node.header(&self.region)?;
            if header.level == level {
                break;
            }
            ensure!(
                header.level > level,
                Internal,
                "sorted-leaf tree: no level {level}"
            );
            at = header.leftmost;
        }
        let mut nodes = Vec::new();
        let limit = self.region.len() / self.root.page_bytes;
        while at != 0 {
            ensure!(
                nodes.len() as u64 <= limit,
                Internal,
                "sorted-leaf tree: a cycle of sibling links at level {level}"
            );
            nodes.push(at);
            at = self.node(at).header(&self.region)?.sibling;
        }
        Ok(nodes)
    }

    /// Completes a split or shift a crash cut short in `node`: its high key
    /// set to its sibling's low key, its array ended at its high key, and
    /// each record seen twice removed once (its left copy, which may hold
    /// a half-shifted value).
    fn tidy(&self, node: Node) -> Result<()> {
        let (region, persist) = (&self.region, &self.persist);
        let header = node.header(region)?;
        if header.sibling != 0 {
            let low = self.node(header.sibling).header(region)?.low;
            if header.high != low {
                persist.persist_word(region, node.at + HIGH, low);
            }
            if let Some(end) = (0..node.len(region)).find(|&slot| node.record(region, slot).0 >= low) {
                persist.persist_word(region, node.value_at(end), END);
            }
        }
        while let Some(slot) =
            (1..node.len(region)).find(|&slot| node.record(region, slot - 1).0 == node.record(region, slot).0)
        {
            node.shift_out(region, persist, node.len(region), slot - 1);
        }
        Ok(())
    }
}
