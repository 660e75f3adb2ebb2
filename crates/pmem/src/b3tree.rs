//! The B3-tree (seed 002 §4.1-4.3): a B+-tree of [`b3page`](crate::b3page) pages, u64
//! keys to u64 values, or byte strings to byte strings (each pair a
//! [`record`](crate::record) of its own), on a region.
//!
//! Readers (searches, scans) take no lock: each page they read is kept
//! only if its version did not move meanwhile (see
//! [`pagelatch`](crate::pagelatch)). Inserts and removals within one leaf
//! run at once, each under its leaf's latch; a change of shape (a split,
//! a merge, a rebuild) waits for them and runs alone.
//!
//! A page holds the keys from its low key up to its high key; past the high
//! key, a search moves right to the sibling (B-link). A full page splits
//! keeping itself as the left half (see `B3Tree::split`): its upper half
//! built into a new right sibling, linked (the commit), pruned from its
//! BST, and the separator put in the parent. A page left too deep by the
//! split is rebuilt whole by copy-on-write (see `B3Tree::replace`).
//!
//! Every state a crash leaves answers every search right (move-right
//! covers a split or rebuild cut short); the recovery, owed until the first
//! write, completes what was cut short and frees the blocks no page
//! reaches.
//!
//! A removal that leaves its page sparse merges it with a neighbour under
//! the same parent (see `B3Tree::merge`), or evens the two out, and a root
//! left with one child gives way to it.

use std::cmp::Ordering as Order;
use std::collections::HashSet;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use spillway_core::{ensure, Error, Result};

use crate::b3page::{Header, Insert, Key, Page, Remove, Slots, Stored};
use crate::epoch::Epochs;
use crate::heap::Heap;
use crate::pagelatch::PageLatches;
use crate::persist::Persist;
pub use crate::record::Keys;
use crate::record::{self, MAX_KEY_BYTES};
use crate::region::Region;
use crate::treeroot::{self, RootObject};
pub use crate::treeroot::{Options, TreeStats};

/// The region kind of a B3-tree.
pub const KIND: &str = "b3tree";

/// The root object's magic.
const MAGIC: u64 = u64::from_le_bytes(*b"B3TREErt");

/// A B3-tree on a region.
#[derive(Debug)]
pub struct B3Tree<P: Persist> {
    region: Region,
    heap: Heap,
    persist: P,
    root: RootObject,
    page_bytes: u64,
    /// What it maps: u64 keys, or bytes keys (words and records, see
    /// [`b3page`](crate::b3page)).
    keys: Keys,
    /// Each page's writer latch (holding its node slots, learnt from the
    /// media at its first write since the open: they are not persisted)
    /// and version, which lock-free readers check.
    latches: PageLatches,
    /// The writers' turn: shared by inserts and removals that change one
    /// leaf (each under the leaf's latch), exclusive for what changes the
    /// tree's shape (splits, merges, rebuilds), the recovery, a check and
    /// the close. Readers take none.
    turn: RwLock<()>,
    /// Pages unlinked, freed once no reader can stand on them.
    epochs: Epochs,
    /// A recovery is owed (the tree was not closed clean): made before the
    /// first write, the first check or the close, in the exclusive turn.
    /// Reads need none (see [`attach`](B3Tree::attach)).
    repair: AtomicBool,
    /// Splits, rebuilds, merges and the flushes of balancing since the
    /// open (for the statistics).
    splits: AtomicU64,
    rebuilds: AtomicU64,
    merges: AtomicU64,
    merge_flushes: AtomicU64,
}

/// What a page is built to hold: a leaf's pairs, or an internal page's
/// separators and children.
#[derive(Debug, Clone, Copy)]
enum Part<'a> {
    Leaf(&'a [(u64, u64)]),
    Internal(&'a [Stored], &'a [u64]),
}

/// What a page holds.
enum Content {
    Leaf(Vec<(u64, u64)>),
    Internal {
        separators: Vec<Stored>,
        children: Vec<u64>,
    },
}

impl Content {
    fn all(&self) -> Part<'_> {
        match self {
            Content::Leaf(pairs) => Part::Leaf(pairs),
            Content::Internal { separators, children } => Part::Internal(separators, children),
        }
    }

    /// Its keys: a leaf's pairs, an internal page's separators.
    fn len(&self) -> usize {
        match self {
            Content::Leaf(pairs) => pairs.len(),
            Content::Internal { separators, .. } => separators.len(),
        }
    }

    /// A split's separator and the right half's content, the left half
    /// keeping `mid` keys (`1..len`): a leaf's pairs from `mid` up; an
    /// internal page's separators after separator `mid` (which moves up)
    /// and the children after it.
    /// (A leaf's separator is its key's pair: see `B3Tree::separator`.)
    fn upper(&self, mid: usize) -> (Stored, Part<'_>) {
        assert!((1..self.len()).contains(&mid), "a split keeps keys on both sides");
        match self {
            Content::Leaf(pairs) => (
                Stored {
                    word: pairs[mid].0,
                    record: pairs[mid].1,
                },
                Part::Leaf(&pairs[mid..]),
            ),
            Content::Internal { separators, children } => (
                separators[mid],
                Part::Internal(&separators[mid + 1..], &children[mid + 1..]),
            ),
        }
    }
}

/// The depth past which a split page is rebuilt as a complete tree: three
/// times a complete tree's (a BST grown by random inserts is about 2.5
/// times; one grown by inserts in order is a chain).
fn deepest(page_bytes: u64) -> u32 {
    3 * (u32::BITS - Page::capacity(page_bytes).leading_zeros())
}

/// Whether a page of `capacity` node slots holding `used` nodes is sparse:
/// below a quarter full (not half: see `DESIGN.md`).
fn sparse(used: u32, capacity: u32) -> bool {
    used < capacity / 4
}

/// Whether two pages' nodes merged would fill at most three quarters of a
/// page (room left for inserts before the page splits again).
fn mergeable(nodes: u32, capacity: u32) -> bool {
    nodes <= capacity / 4 * 3
}

impl<P: Persist> B3Tree<P> {
    /// Creates a tree in a new region file at `path`.
    pub fn create(path: &Path, options: Options, persist: P) -> Result<B3Tree<P>> {
        treeroot::check(&options)?;
        B3Tree::format(
            Region::create(path, options.region_bytes, KIND)?,
            options,
            persist,
        )
    }

    /// Creates a tree in memory (tests, the crash tester).
    pub fn in_memory(options: Options, persist: P) -> Result<B3Tree<P>> {
        treeroot::check(&options)?;
        B3Tree::format(Region::in_memory(options.region_bytes, KIND)?, options, persist)
    }

    /// Opens the tree in the region file at `path`, recovering it.
    pub fn open(path: &Path, persist: P) -> Result<B3Tree<P>> {
        B3Tree::attach(Region::open(path, KIND)?, persist)
    }

    fn format(region: Region, options: Options, persist: P) -> Result<B3Tree<P>> {
        let (heap, root) = RootObject::format(&region, &persist, MAGIC, &options, |leaf| {
            let header = Header {
                level: 0,
                sibling: 0,
                high: Stored::NONE,
                low: Stored::NONE,
            };
            let page = Page {
                at: leaf,
                bytes: options.page_bytes,
            };
            Page::build_leaf(&region, &persist, page, header, &[]);
        })?;
        Ok(B3Tree::assemble(region, heap, persist, root))
    }

    fn assemble(region: Region, heap: Heap, persist: P, root: RootObject) -> B3Tree<P> {
        B3Tree {
            latches: PageLatches::new(region.len(), root.page_bytes),
            region,
            heap,
            persist,
            root,
            page_bytes: root.page_bytes,
            keys: root.keys,
            turn: RwLock::new(()),
            epochs: Epochs::default(),
            repair: AtomicBool::new(false),
            splits: AtomicU64::new(0),
            rebuilds: AtomicU64::new(0),
            merges: AtomicU64::new(0),
            merge_flushes: AtomicU64::new(0),
        }
    }

    /// Opens the tree held by `region` (a file's, or a crash image's),
    /// reading only its root object and root page's header. A tree not
    /// closed clean owes a recovery (a split cut short completed, the
    /// blocks no page reaches freed), made before its first write: searches
    /// and scans are right without it (a search moves right past a link a
    /// split left at a left sibling; a removal's leftover copy holds the
    /// same value), so the open costs nothing whatever the tree's size.
    pub fn attach(region: Region, persist: P) -> Result<B3Tree<P>> {
        let (heap, root, dirty) = RootObject::open(&region, &persist, MAGIC, "B3-tree")?;
        let tree = B3Tree::assemble(region, heap, persist, root);
        tree.repair.store(dirty, Ordering::Relaxed);
        // (The root page at least: a damaged file is named at its open.)
        tree.page(tree.root_page()).header(&tree.region)?;
        Ok(tree)
    }

    /// Makes the recovery owed, if any, and marks the tree closed and its
    /// file durable.
    pub fn close(mut self) -> Result<()> {
        drop(self.writing()?);
        for block in self.epochs.drain() {
            self.heap.free(&self.region, &self.persist, block);
        }
        self.heap.close(&self.region, &self.persist);
        self.region.sync()
    }

    /// Whether a recovery is owed (until the first write).
    pub fn owes_repair(&self) -> bool {
        self.repair.load(Ordering::Relaxed)
    }

    /// The exclusive turn (a change of the tree's shape), the recovery
    /// owed made first.
    fn writing(&self) -> Result<RwLockWriteGuard<'_, ()>> {
        let turn = self.turn.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        if self.repair.load(Ordering::Relaxed) {
            self.recover()?;
            self.repair.store(false, Ordering::Relaxed);
            self.reclaim();
        }
        Ok(turn)
    }

    /// The shared turn (a change to one leaf, under its latch), the
    /// recovery owed made first.
    fn sharing(&self) -> Result<RwLockReadGuard<'_, ()>> {
        if self.repair.load(Ordering::Relaxed) {
            drop(self.writing()?);
        }
        Ok(self.turn.read().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    /// Frees the pages and records retired that no reader can stand on any
    /// more.
    fn reclaim(&self) {
        self.epochs
            .reclaim(|block| self.heap.free(&self.region, &self.persist, block));
    }

    /// What the tree maps.
    pub fn keys(&self) -> Keys {
        self.keys
    }

    /// Refuses a call for the other kind of keys.
    fn expect(&self, keys: Keys) -> Result<()> {
        ensure!(
            self.keys == keys,
            InvalidArgument,
            "this B3-tree maps {} keys, not {}",
            self.keys.name(),
            keys.name()
        );
        Ok(())
    }

    /// The key a stored key is, for a search: a u64 key's word; a bytes
    /// key's bytes, read from its record (none: the empty key, the least).
    fn key_of(&self, stored: Stored) -> Result<Key<'static>> {
        Ok(match self.keys {
            Keys::U64 => Key::number(stored.word),
            Keys::Bytes if stored.record == 0 => Key::bytes(Vec::new()),
            Keys::Bytes => Key::bytes(record::key(&self.region, stored.record)?),
        })
    }

    /// How two stored keys order.
    fn order(&self, a: Stored, b: Stored) -> Result<Order> {
        self.key_of(a)?.order_stored(&self.region, b)
    }

    /// Whether two range ends (`None`: no end) are the same key.
    fn same(&self, a: Option<Stored>, b: Option<Stored>) -> Result<bool> {
        Ok(match (a, b) {
            (Some(a), Some(b)) => self.order(a, b)? == Order::Equal,
            (a, b) => a.is_none() && b.is_none(),
        })
    }

    /// The least key there can be.
    fn least(&self) -> Key<'static> {
        match self.keys {
            Keys::U64 => Key::number(0),
            Keys::Bytes => Key::bytes(Vec::new()),
        }
    }

    /// Its keys (a scan of the leaves).
    pub fn len(&self) -> Result<usize> {
        let _pin = self.epochs.pin();
        self.scan(Bound::Unbounded, Bound::Unbounded, usize::MAX, true)
            .map(|pairs| pairs.len())
    }

    /// Whether it holds no key.
    pub fn is_empty(&self) -> Result<bool> {
        let _pin = self.epochs.pin();
        self.scan(Bound::Unbounded, Bound::Unbounded, 1, true)
            .map(|first| first.is_empty())
    }

    /// Persistence counts and shape.
    pub fn stats(&self) -> Result<TreeStats> {
        let _pin = self.epochs.pin();
        let root = self.page(self.root_page()).header(&self.region)?;
        let changes = [&self.splits, &self.rebuilds, &self.merges, &self.merge_flushes]
            .map(|count| count.load(Ordering::Relaxed));
        Ok(self.root.stats(&self.region, &self.persist, root.level, changes))
    }

    /// The persistence mode (its counts; a trace).
    pub fn persist(&self) -> &P {
        &self.persist
    }

    /// The region (for images and statistics).
    pub fn region(&self) -> &Region {
        &self.region
    }

    fn page(&self, at: u64) -> Page {
        Page {
            at,
            bytes: self.page_bytes,
        }
    }

    fn root_page(&self) -> u64 {
        self.root.page(&self.region)
    }

    /// The page of `level` that holds `key`, and the internal pages whose
    /// child links the descent followed (the last leads to it, perhaps
    /// through right moves). Moves right past high keys.
    fn descend(&self, key: &Key<'_>, level: u8) -> Result<(u64, Vec<u64>)> {
        let mut path = Vec::new();
        let at = self.walk(key, level, Some(&mut path))?;
        Ok((at, path))
    }

    /// The page of `level` that holds `key`, noting in `path` (a change of
    /// shape's) the internal pages left through a child link. A writer's:
    /// in either turn, no page it reads above the leaves changes, nor any
    /// leaf's range.
    fn walk(&self, key: &Key<'_>, level: u8, mut path: Option<&mut Vec<u64>>) -> Result<u64> {
        let mut at = self.root_page();
        for _ in 0..=self.region.len() / self.page_bytes {
            let page = self.page(at);
            page.prefetch(&self.region);
            let page_level = page.level(&self.region)?;
            if let Some(sibling) = page.past(&self.region, key)? {
                at = sibling;
                continue;
            }
            if page_level <= level {
                return Ok(at);
            }
            if let Some(path) = path.as_deref_mut() {
                path.push(at);
            }
            at = page.child_for(&self.region, key)?;
        }
        Err(Error::corruption(
            self.region.path(),
            at,
            "a B3-tree descent that never ends",
        ))
    }

    /// The leaf that holds `key`, found without a latch or a turn (a
    /// reader's, pinned), with the version its latch had when its header
    /// was read: the caller reads the leaf, then keeps what it read only if
    /// the version is unchanged. A page changed while it was read, or dead,
    /// starts the descent again from the root.
    fn read_leaf(&self, key: &Key<'_>) -> Result<(Page, u64)> {
        'descent: loop {
            let mut at = self.root_page();
            for _ in 0..=self.region.len() / self.page_bytes {
                let Some(version) = self.latches.stable(at) else {
                    continue 'descent;
                };
                let page = self.page(at);
                page.prefetch(&self.region);
                let next = page.level(&self.region).and_then(|level| {
                    Ok(if let Some(sibling) = page.past(&self.region, key)? {
                        Some(sibling)
                    } else if level > 0 {
                        Some(page.child_for(&self.region, key)?)
                    } else {
                        None
                    })
                });
                if !self.latches.unchanged(at, version) {
                    continue 'descent;
                }
                match next? {
                    Some(next) => at = next,
                    None => return Ok((page, version)),
                }
            }
            return Err(Error::corruption(
                self.region.path(),
                at,
                "a B3-tree descent that never ends",
            ));
        }
    }

    /// The value of `key`: a lock-free read.
    pub fn get(&self, key: u64) -> Result<Option<u64>> {
        self.expect(Keys::U64)?;
        let _pin = self.epochs.pin();
        self.find(&Key::number(key))
    }

    /// The value of the bytes key `key`: a lock-free read.
    pub fn get_bytes(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.expect(Keys::Bytes)?;
        if key.len() as u64 > MAX_KEY_BYTES {
            return Ok(None);
        }
        let _pin = self.epochs.pin();
        // (The record is read pinned: freed only once no reader can be on
        // it.)
        match self.find(&Key::bytes(key))? {
            Some(at) => Ok(Some(record::read(&self.region, at)?.1)),
            None => Ok(None),
        }
    }

    /// The value word of `key` (a bytes key's record), in a pinned
    /// reader's lock-free descent.
    fn find(&self, key: &Key<'_>) -> Result<Option<u64>> {
        loop {
            let (leaf, version) = self.read_leaf(key)?;
            let found = leaf.get(&self.region, key);
            if self.latches.unchanged(leaf.at, version) {
                return found;
            }
        }
    }

    /// Sets `key` to `value`; returns the value it replaced.
    pub fn insert(&self, key: u64, value: u64) -> Result<Option<u64>> {
        self.expect(Keys::U64)?;
        self.put(&Key::number(key), value)
    }

    /// Sets the bytes key `key` to `value` (see [`record`] for the
    /// limits): a new record, persisted before the one store that
    /// publishes it (a new node's link, or the old node's value word);
    /// returns whether a value was replaced. The old record is freed once
    /// no reader can stand on it.
    pub fn insert_bytes(&self, key: &[u8], value: &[u8]) -> Result<bool> {
        self.expect(Keys::Bytes)?;
        record::check(key, value)?;
        if self.repair.load(Ordering::Relaxed) {
            // (The recovery frees every record no page reaches: this one
            // is written after it.)
            drop(self.writing()?);
        }
        let at = record::write(&self.region, &self.heap, &self.persist, key, value)?;
        match self.put(&Key::bytes(key), at) {
            Ok(old) => {
                if let Some(old) = old {
                    self.epochs.retire(old);
                    self.reclaim();
                }
                Ok(old.is_some())
            }
            Err(error) => {
                self.heap.free(&self.region, &self.persist, at);
                Err(error)
            }
        }
    }

    /// Sets `key` to the value word `value`; returns the word it replaced.
    /// In the shared turn, under the leaf's latch; a full leaf splits in
    /// the exclusive turn, and the insert goes again.
    fn put(&self, key: &Key<'_>, value: u64) -> Result<Option<u64>> {
        loop {
            {
                let _turn = self.sharing()?;
                let leaf = self.page(self.walk(key, 0, None)?);
                let mut writing = self.latches.write(leaf.at);
                let free = writing.slots(leaf, &self.region)?;
                match leaf.insert(&self.region, &self.persist, free, key, value)? {
                    Insert::Replaced(old) => return Ok(Some(old)),
                    Insert::Added => return Ok(None),
                    Insert::Full => {}
                }
            }
            self.split_full(key)?;
        }
    }

    /// Splits the leaf that holds `key` if it is full (another writer may
    /// have split it first), in the exclusive turn.
    fn split_full(&self, key: &Key<'_>) -> Result<()> {
        let _turn = self.writing()?;
        let (leaf, path) = self.descend(key, 0)?;
        let page = self.page(leaf);
        if self.full(page)? {
            self.split(page, &path, None)?;
        }
        self.reclaim();
        Ok(())
    }

    /// Whether `page` has no free slot.
    fn full(&self, page: Page) -> Result<bool> {
        Ok(self.latches.used(page, &self.region)? >= Page::capacity(self.page_bytes))
    }

    /// Removes `key`; returns its value. A page left sparse is merged or
    /// evened out with a neighbour ([`rebalance`](Self::rebalance)).
    /// In the shared turn, under the leaf's latch, as an insert; the
    /// balancing in the exclusive turn.
    pub fn remove(&self, key: u64) -> Result<Option<u64>> {
        self.expect(Keys::U64)?;
        self.take(&Key::number(key))
    }

    /// Removes the bytes key `key`; returns its value. Its record is freed
    /// once no reader can stand on it.
    pub fn remove_bytes(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.expect(Keys::Bytes)?;
        if key.len() as u64 > MAX_KEY_BYTES {
            return Ok(None);
        }
        let pin = self.epochs.pin();
        let Some(at) = self.take(&Key::bytes(key))? else {
            return Ok(None);
        };
        let value = record::read(&self.region, at).map(|(_, value)| value);
        self.epochs.retire(at);
        drop(pin);
        self.reclaim();
        value.map(Some)
    }

    /// Removes `key`; returns its value word (see [`remove`](Self::remove)).
    fn take(&self, key: &Key<'_>) -> Result<Option<u64>> {
        let mut removed = None;
        loop {
            let (absent, thin) = {
                let _turn = self.sharing()?;
                let leaf = self.page(self.walk(key, 0, None)?);
                let mut writing = self.latches.write(leaf.at);
                let free = writing.slots(leaf, &self.region)?;
                let absent = match leaf.remove(&self.region, &self.persist, free, key)? {
                    Remove::Removed(value) => {
                        removed = Some(value);
                        true
                    }
                    Remove::Absent => true,
                    // No slot for its successor's copy.
                    Remove::Full => false,
                };
                (absent, sparse(free.used(), Page::capacity(self.page_bytes)))
            };
            if !absent {
                self.split_full(key)?;
                continue;
            }
            if thin && removed.is_some() {
                let _turn = self.writing()?;
                let before = self.persist.counts().flushes();
                self.rebalance(key)?;
                let flushes = self.persist.counts().flushes() - before;
                self.merge_flushes.fetch_add(flushes, Ordering::Relaxed);
                self.reclaim();
            }
            return Ok(removed);
        }
    }

    /// Balances the sparse page that holds `key`, from the leaves up: it
    /// is merged with its neighbour under the same parent (the one to its
    /// right, else to its left) where their nodes fit in three quarters of
    /// a page; otherwise the fuller of the two is split where the keys it
    /// gives up, merged with the sparse one, make half of both (the
    /// redistribution: a split and a merge, each failure-atomic). A page
    /// still sparse after a merge merges again; then its parent, which
    /// lost separators, is balanced in turn; and a root left with one
    /// child gives way to it ([`collapse`](Self::collapse)). A parent with
    /// no free slot (the separator's removal may need one) splits first.
    fn rebalance(&self, key: &Key<'_>) -> Result<()> {
        let capacity = Page::capacity(self.page_bytes);
        let mut level = 0;
        // Whether a page of this level merged (its parent is checked next).
        let mut merged = false;
        loop {
            let (at, path) = self.descend(key, level)?;
            let Some(&parent) = path.last() else {
                return self.collapse();
            };
            let page = self.page(at);
            if !sparse(self.latches.used(page, &self.region)?, capacity) {
                if !merged {
                    return Ok(());
                }
                (level, merged) = (level + 1, false);
                continue;
            }
            let parent = self.page(parent);
            let children = parent.children(&self.region)?;
            let k = children.iter().position(|&child| child == at).ok_or_else(|| {
                Error::Internal(format!(
                    "B3-tree page {at}: not a child of page {}, which the descent took to it",
                    parent.at
                ))
            })?;
            if children.len() == 1 {
                // Its parent has no other child: it is sparse too, and
                // merges at the level above.
                (level, merged) = (level + 1, false);
                continue;
            }
            let k = k.min(children.len() - 2);
            let (left, right) = (self.page(children[k]), self.page(children[k + 1]));
            let separator = parent.keys(&self.region)?[k];
            let l = self.latches.used(left, &self.region)?;
            let r = self.latches.used(right, &self.region)?;
            if mergeable(l + r + u32::from(level > 0), capacity) {
                if self.full(parent)? {
                    // (The separator's removal may need a slot for its
                    // successor's copy: the parent splits first.)
                    self.split(parent, &path[..path.len() - 1], None)?;
                    continue;
                }
                self.merge(parent, (left, separator, right), &path)?;
                merged = true;
            } else if left.at == at {
                // The right one keeps its lowest keys, for the left.
                self.split(right, &path, Some((r - l).div_ceil(2) as usize))?;
            } else {
                // The left one's highest keys go to a new page, which
                // merges with the right one.
                self.split(left, &path, Some((l - r).div_ceil(2) as usize))?;
            }
        }
    }

    /// Merges the page `right` into `left`, its left neighbour under
    /// `parent` (reached through `path`), `separator` between them, in
    /// place:
    /// 1. right's keys are grafted into left's BST above its keys, where
    ///    they are unread (past its high key: `Page::graft`); an internal
    ///    page's separator comes down between the two pages' children;
    /// 2. left takes over right's range: its high key and sibling become
    ///    right's (the commit: one header line, `Page::absorb`);
    /// 3. the parent's link to right is pointed at left, then the
    ///    separator's node goes with one of the two links to left
    ///    (`Page::remove_separator`);
    /// 4. right, which no link reaches, is freed.
    ///
    /// Searches are right after every step: past step 2, one that the
    /// parent sends to right finds its keys unchanged there. Recovery
    /// undoes a merge cut short before its commit (a page's keys past its
    /// high key are pruned) and completes one cut short after it. A page
    /// left deeper than [`deepest`] by the graft is rebuilt.
    fn merge(
        &self,
        parent: Page,
        (left, separator, right): (Page, Stored, Page),
        path: &[u64],
    ) -> Result<()> {
        self.merges.fetch_add(1, Ordering::Relaxed);
        let (region, persist) = (&self.region, &self.persist);
        let header = right.header(region)?;
        let content = self.content(right, header.level)?;
        let last = match header.level {
            0 => 0,
            _ => *left
                .children(region)?
                .last()
                .expect("an internal page has a child"),
        };
        let mut writing = self.latches.write(left.at);
        let free = writing.slots(left, region)?;
        let grafted = match content {
            Content::Leaf(pairs) => left.graft(region, persist, free, &pairs, None)?,
            Content::Internal { separators, children } => {
                let pairs: Vec<(u64, u64)> = std::iter::once(separator)
                    .chain(separators)
                    .map(|key| (key.word, key.record))
                    .collect();
                let children: Vec<u64> = std::iter::once(last).chain(children).collect();
                left.graft(region, persist, free, &pairs, Some(&children))?
            }
        };
        ensure!(
            grafted,
            Internal,
            "B3-tree page {}: no room to merge page {}, though counted",
            left.at,
            right.at
        );
        left.absorb(region, persist, header.high, header.sibling);
        drop(writing);
        let key = self.key_of(separator)?;
        let mut writing = self.latches.write(parent.at);
        parent.relink(region, persist, &key, right.at, left.at)?;
        let free = writing.slots(parent, region)?;
        let removed = parent.remove_separator(region, persist, free, &key, left.at)?;
        drop(writing);
        ensure!(
            matches!(removed, Remove::Removed(_)),
            Internal,
            "B3-tree page {}: separator {separator:?} not removed ({removed:?})",
            parent.at
        );
        self.free_page(right);
        if header.level == 0 && separator.record != 0 {
            // A leaf separator's record (the left page's high key and the
            // right one's low key too) is no key's any more; an internal
            // page's came down into the merged page.
            self.epochs.retire(separator.record);
        }
        if left.slots(region)?.1 > deepest(self.page_bytes) {
            let content = self.content(left, header.level)?;
            self.rebuild(left, path, content.all())?;
        }
        Ok(())
    }

    /// Root collapse: while the root is an internal page with one child
    /// (its last separator merged away), the child becomes the root (one
    /// store of the root word) and the old root is freed.
    fn collapse(&self) -> Result<()> {
        loop {
            let root = self.page(self.root_page());
            if root.level(&self.region)? == 0 {
                return Ok(());
            }
            let [child] = root.children(&self.region)?[..] else {
                return Ok(());
            };
            self.set_root_page(child);
            self.free_page(root);
        }
    }

    /// Splits `page` (reached through `path`) in the seed's B-link manner
    /// but keeping the page as the left half, which keeps `mid` keys (by
    /// default half; a redistribution chooses):
    /// 1. its upper half is built whole into a new page, the right half
    ///    (a complete BST: streamed lines, then a fence), which takes the
    ///    page's sibling and high key and starts at the separator (an
    ///    internal page's median separator moves up);
    /// 2. the page links to it and takes the separator as its high key:
    ///    the commit (`Page::link_right`: one header line);
    /// 3. the page's BST drops the nodes from the separator up (a few
    ///    stores along one path, `Page::prune`), whose slots are free again;
    /// 4. the parent's link to the page becomes a node (separator; page,
    ///    right half), or a new root over the two is published.
    ///
    /// Searches are right after every step (past step 2 they move right
    /// from the page to the right half until step 4 is done). A parent
    /// with no free slot splits first (or its own parent), and the caller
    /// descends again either way. A page left deeper than [`deepest`] (in
    /// order inserts grow a chain of nodes) is then rebuilt whole.
    fn split(&self, page: Page, path: &[u64], mid: Option<usize>) -> Result<()> {
        if let Some((&parent, above)) = path.split_last() {
            let parent = self.page(parent);
            if self.full(parent)? {
                return self.split(parent, above, None);
            }
        }
        self.splits.fetch_add(1, Ordering::Relaxed);
        let header = page.header(&self.region)?;
        let content = self.content(page, header.level)?;
        let (separator, right_part) = content.upper(mid.unwrap_or(content.len() / 2));
        let separator = self.separator(separator, header.level)?;
        let right = self.alloc()?;
        self.build(
            right,
            Header {
                low: separator,
                ..header
            },
            right_part,
        );
        self.persist.fence();
        let mut writing = self.latches.write(page.at);
        page.link_right(&self.region, &self.persist, &header, right, separator);
        page.prune(&self.region, &self.persist, &self.key_of(separator)?)?;
        let (free, depth) = page.slots(&self.region)?;
        writing.set(free);
        drop(writing);
        let halves = (separator, page.at, right);
        match path.last() {
            None => self.new_root(page, header.level + 1, halves)?,
            Some(&parent) => self.add_separator(self.page(parent), &self.key_of(header.low)?, halves)?,
        }
        if depth > deepest(self.page_bytes) {
            let (at, path) = self.descend(&self.key_of(header.low)?, header.level)?;
            ensure!(
                at == page.at,
                Internal,
                "B3-tree page {}: not found by its low key",
                page.at
            );
            let content = self.content(page, header.level)?;
            self.rebuild(page, &path, content.all())?;
        }
        Ok(())
    }

    /// A split's separator, from the pair of the key where it splits: an
    /// internal page's moves up as it is; a leaf's is a copy of its key's
    /// word (and of its bytes, in a record of its own: the key may go
    /// while the separator stays). The separator is also the left page's
    /// high key and the right one's low key.
    fn separator(&self, Stored { word, record }: Stored, level: u8) -> Result<Stored> {
        Ok(match (self.keys, level) {
            (_, 1..) => Stored { word, record },
            (Keys::U64, 0) => Stored { word, record: 0 },
            (Keys::Bytes, 0) => Stored {
                word,
                record: record::write(
                    &self.region,
                    &self.heap,
                    &self.persist,
                    &record::key(&self.region, record)?,
                    &[],
                )?,
            },
        })
    }

    /// Puts in `parent`, where `low` leads to the page `left`, the node
    /// (separator; left, right): step 4 of a split.
    fn add_separator(&self, parent: Page, low: &Key<'_>, halves: (Stored, u64, u64)) -> Result<()> {
        let mut writing = self.latches.write(parent.at);
        let free = writing.slots(parent, &self.region)?;
        let placed = parent.replace_child(&self.region, &self.persist, free, low, halves.1, halves)?;
        ensure!(
            placed,
            Internal,
            "B3-tree page {}: no room for a split's node, though a full parent splits first",
            parent.at
        );
        Ok(())
    }

    /// Puts a page holding `part` in the place of `page` (reached through
    /// `path`), with its range and sibling: a page rebuilt as a complete
    /// BST, by copy-on-write (see [`replace`](Self::replace)).
    fn rebuild(&self, page: Page, path: &[u64], part: Part<'_>) -> Result<()> {
        self.rebuilds.fetch_add(1, Ordering::Relaxed);
        let header = page.header(&self.region)?;
        let new = self.alloc()?;
        self.build(new, header, part);
        self.persist.fence();
        match path.last() {
            None => self.set_root_page(new),
            Some(&parent) => self.replace(page, header, self.page(parent), new)?,
        }
        self.free_page(page);
        Ok(())
    }

    /// Publishes `page` as the root: one store of the root word.
    fn set_root_page(&self, page: u64) {
        self.root.set_page(&self.region, &self.persist, page);
    }

    /// Retires a page no link reaches any more: marked dead (a reader
    /// that reaches it through a link read before starts again), and freed
    /// once no reader can stand on it (see [`reclaim`](Self::reclaim)).
    fn free_page(&self, page: Page) {
        self.latches.write(page.at).kill();
        self.epochs.retire(page.at);
    }

    /// A page's content as it is.
    fn content(&self, page: Page, level: u8) -> Result<Content> {
        Ok(if level == 0 {
            Content::Leaf(page.pairs(&self.region)?)
        } else {
            Content::Internal {
                separators: page.keys(&self.region)?,
                children: page.children(&self.region)?,
            }
        })
    }

    /// Writes the page at `at` holding `part`, its slots noted.
    fn build(&self, at: u64, header: Header, part: Part<'_>) {
        let (region, persist, page) = (&self.region, &self.persist, self.page(at));
        let count = match part {
            Part::Leaf(pairs) => Page::build_leaf(region, persist, page, header, pairs),
            Part::Internal(separators, children) => {
                Page::build_internal(region, persist, page, header, separators, children)
            }
        };
        self.latches.revive(at, Slots::built(count));
    }

    fn alloc(&self) -> Result<u64> {
        self.heap.alloc(&self.region, &self.persist, self.page_bytes)
    }

    /// A root split: a new root over the halves, published by one store.
    fn new_root(&self, old: Page, level: u8, (separator, left, right): (Stored, u64, u64)) -> Result<()> {
        ensure!(
            self.root_page() == old.at,
            Internal,
            "the B3-tree's root moved under a split"
        );
        let root = self.alloc()?;
        let header = Header {
            level,
            sibling: 0,
            high: Stored::NONE,
            low: Stored::NONE,
        };
        self.build(root, header, Part::Internal(&[separator], &[left, right]));
        self.persist.fence();
        self.set_root_page(root);
        Ok(())
    }

    /// Puts `new` (built with the same range and sibling) in the place of
    /// `old`, whose parent is `parent`, by copy-on-write. Two links reach
    /// the old page, its parent's and its left sibling's:
    /// 1. the parent's link is pointed at the left sibling (the old page's
    ///    keys still reach it by moving right);
    /// 2. the left sibling's sibling link is pointed at the new page: the
    ///    commit (the leftmost page of a level has no left sibling: step 3
    ///    alone commits);
    /// 3. the parent's link is pointed at the new page.
    fn replace(&self, old: Page, header: Header, parent: Page, new: u64) -> Result<()> {
        // The child the parent's link for the old page's keys leads to: the
        // old page, or (after a crash cut a rebuild short) a page left of it.
        let low = self.key_of(header.low)?;
        let mut from = parent.child_for(&self.region, &low)?;
        if header.low != Stored::NONE {
            let left_sibling = self.walk(&low.clone().below(), header.level, None)?;
            let sibling = self.page(left_sibling);
            ensure!(
                sibling.header(&self.region)?.sibling == old.at,
                Internal,
                "B3-tree page {}: the page left of {} links elsewhere",
                left_sibling,
                old.at
            );
            if from == old.at {
                let _writing = self.latches.write(parent.at);
                parent.relink(&self.region, &self.persist, &low, old.at, left_sibling)?;
                from = left_sibling;
            }
            let _writing = self.latches.write(sibling.at);
            sibling.set_sibling(&self.region, &self.persist, new);
        }
        let _writing = self.latches.write(parent.at);
        parent.relink(&self.region, &self.persist, &low, from, new)
    }

    /// Every (key, value) in key order.
    pub fn entries(&self) -> Result<Vec<(u64, u64)>> {
        self.range(.., usize::MAX)
    }

    /// The (key, value) pairs with keys in `keys`, in key order, at most
    /// `limit` of them: the leaf of the range's start, then its siblings.
    pub fn range(&self, keys: impl RangeBounds<u64>, limit: usize) -> Result<Vec<(u64, u64)>> {
        self.numbers(keys, limit, true)
    }

    /// As [`range`](Self::range), in reverse key order from the range's
    /// end: the leaf of the range's end, then the leaves left of it, each
    /// found by a descent to the keys just below its low key (a page links
    /// only to its right sibling).
    pub fn range_rev(&self, keys: impl RangeBounds<u64>, limit: usize) -> Result<Vec<(u64, u64)>> {
        self.numbers(keys, limit, false)
    }

    fn numbers(&self, keys: impl RangeBounds<u64>, limit: usize, forward: bool) -> Result<Vec<(u64, u64)>> {
        self.expect(Keys::U64)?;
        let bound = |end: Bound<&u64>| end.map(|&key| Key::number(key));
        let _pin = self.epochs.pin();
        self.scan(bound(keys.start_bound()), bound(keys.end_bound()), limit, forward)
    }

    /// The (key, value) pairs of a bytes key tree with keys from `low` to
    /// `high`, in key order (`forward`) or in reverse order from `high`,
    /// at most `limit`.
    pub fn range_bytes(
        &self,
        low: Bound<&[u8]>,
        high: Bound<&[u8]>,
        limit: usize,
        forward: bool,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.expect(Keys::Bytes)?;
        let _pin = self.epochs.pin();
        // (The records are read pinned: freed only once no reader can be on
        // them.)
        self.scan(low.map(Key::bytes), high.map(Key::bytes), limit, forward)?
            .into_iter()
            .map(|(_, at)| record::read(&self.region, at))
            .collect()
    }

    /// Every (key, value) of a bytes key tree, in key order.
    pub fn entries_bytes(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.range_bytes(Bound::Unbounded, Bound::Unbounded, usize::MAX, true)
    }

    /// A lock-free scan (the caller pinned): the stored pairs (key word,
    /// value word) with keys from `low` to `high`, forward from `low` or
    /// backward from `high`, at most `limit`. Each leaf read whole, then
    /// kept only if its version is unchanged; a leaf changed meanwhile, or
    /// dead, is read again from a descent to the keys after the last one
    /// taken.
    fn scan(
        &self,
        low: Bound<Key<'_>>,
        high: Bound<Key<'_>>,
        limit: usize,
        forward: bool,
    ) -> Result<Vec<(u64, u64)>> {
        // Where the scan starts: a key, or just past one.
        let start = match (forward, &low, &high) {
            (true, Bound::Included(key), _) | (false, _, Bound::Included(key)) => key.clone(),
            (true, Bound::Excluded(key), _) => key.clone().above(),
            (false, _, Bound::Excluded(key)) => key.clone().below(),
            (true, Bound::Unbounded, _) => self.least(),
            (false, _, Bound::Unbounded) => Key::top(),
        };
        // A page is read from a key past the range's near end (the start,
        // or the keys after the last one taken): only its far end is
        // checked, as a key between the last key the range holds and the
        // first it does not, and the keys come in order, so the first key
        // past it ends the scan.
        let (far, side) = if forward {
            (high, Order::Greater)
        } else {
            (low, Order::Less)
        };
        let far = match far {
            Bound::Included(key) if forward => Some(key.above()),
            Bound::Excluded(key) if !forward => Some(key.above()),
            Bound::Included(key) | Bound::Excluded(key) => Some(key.below()),
            Bound::Unbounded => None,
        };
        let region = &self.region;
        // Where the scan goes on when a page was changed as it was read (or
        // its sibling is dead), and in a page's sibling: from the keys after
        // the last one taken.
        let again = |pairs: &[(u64, u64)]| -> Result<Key<'static>> {
            Ok(match pairs.last() {
                None => start.clone().into_owned(),
                Some(&(word, value)) => {
                    let key = self.key_of(Stored { word, record: value })?;
                    if forward {
                        key.above()
                    } else {
                        key.below()
                    }
                }
            })
        };
        let mut pairs: Vec<(u64, u64)> = Vec::with_capacity(limit.min(1024));
        let (mut page, mut version) = self.read_leaf(&start)?;
        let mut bound = start.clone();
        // The sibling whose lines were asked for while its left page was
        // read (not asked for again).
        let mut fetched = None;
        loop {
            if fetched != Some(page.at) {
                page.prefetch_all(region);
            }
            // (The page's pairs are read into `pairs`, kept if the page was
            // unchanged as it was read.)
            let kept = pairs.len();
            let want = limit - kept;
            // Whether the range may go on past this page.
            let mut more = true;
            let read = page.header(region).and_then(|header| {
                // (Keys from the page's high key up, left by a split or a
                // merge cut short, some pruned and some not, are its
                // sibling's: a forward scan stops at the first, a backward
                // one starts below them.)
                let end = header.end();
                let below_end;
                let from = match end {
                    Some(end) if !forward && bound.order_stored(region, end)? != Order::Less => {
                        below_end = self.key_of(end)?.below();
                        &below_end
                    }
                    _ => &bound,
                };
                // (A scan wanting more than half a page's nodes will most
                // likely go on to the sibling: its lines come meanwhile.)
                if forward && header.sibling != 0 && want as u64 > u64::from(Page::capacity(page.bytes)) / 2 {
                    self.page(header.sibling).prefetch_all(region);
                    fetched = Some(header.sibling);
                }
                page.read_from(region, from, forward, want, &mut pairs)?;
                if let Some(end) = end.filter(|_| forward) {
                    let end = self.key_of(end)?;
                    cut(&mut pairs, kept, |word, value| {
                        Ok(end.order(region, word, value)? != Order::Greater)
                    })?;
                }
                if let Some(far) = &far {
                    more = !cut(&mut pairs, kept, |word, value| {
                        Ok(far.order(region, word, value)? != side)
                    })?;
                }
                more &= pairs.len() - kept < want;
                Ok(header)
            });
            let next = if self.latches.unchanged(page.at, version) {
                let header = read?;
                match (more, forward) {
                    (true, true) if header.sibling != 0 => match self.latches.stable(header.sibling) {
                        Some(stable) => {
                            (page, version) = (self.page(header.sibling), stable);
                            // (From past the last key taken: a split whose
                            // commit linked the sibling before it lowered
                            // the high key leaves keys in both.)
                            bound = again(&pairs)?;
                            continue;
                        }
                        None => Some(again(&pairs)?),
                    },
                    (true, false) if header.low != Stored::NONE => Some(self.key_of(header.low)?.below()),
                    _ => None,
                }
            } else {
                pairs.truncate(kept);
                Some(again(&pairs)?)
            };
            let Some(next) = next else {
                return Ok(pairs);
            };
            (page, version) = self.read_leaf(&next)?;
            bound = next;
        }
    }

    /// Checks the tree's invariants: each page's level is one below its
    /// parent's; each child link leads to the page whose low key starts
    /// the link's range and whose high key ends it (a page with no high key
    /// ends its level, and only the last link of a level leads there);
    /// every key of a page lies in its range, in order.
    pub fn verify(&self) -> Result<()> {
        let _turn = self.writing()?;
        let root = self.root_page();
        let mut stack = vec![(root, None, Stored::NONE, None)];
        while let Some((at, level, low, high)) = stack.pop() {
            let bad = |what: String| {
                Err(Error::corruption(
                    self.region.path(),
                    at,
                    format!("B3-tree page {at}: {what}"),
                ))
            };
            let same = |a, b| self.same(a, b);
            let page = self.page(at);
            let header = page.header(&self.region)?;
            let ends = header.end();
            if level.is_some_and(|level| header.level != level)
                || !same(Some(header.low), Some(low))?
                || !same(ends, high)?
            {
                return bad(format!(
                    "level {}, keys from {:?} to {ends:?}, where its parent leads keys from {low:?} to {high:?} at level {level:?}",
                    header.level, header.low
                ));
            }
            let keys = page.keys(&self.region)?;
            if self.keys == Keys::Bytes {
                for key in &keys {
                    // (A leaf's record holds a value too: its checksum is
                    // checked.)
                    record::read(&self.region, key.record)?;
                }
            }
            let below = match keys.first() {
                Some(&first) => self.order(low, first)? == Order::Greater,
                None => false,
            };
            let past = match (keys.last(), high) {
                (Some(&last), Some(high)) => self.order(last, high)? != Order::Less,
                _ => false,
            };
            if below || past {
                return bad(format!("keys outside {low:?}..{high:?}"));
            }
            for pair in keys.windows(2) {
                if self.order(pair[0], pair[1])? != Order::Less {
                    return bad("keys out of order, or twice".into());
                }
            }
            if header.level > 0 {
                let children = page.children(&self.region)?;
                if children.len() != keys.len() + 1 {
                    return bad(format!(
                        "{} children for {} separators",
                        children.len(),
                        keys.len()
                    ));
                }
                for (k, &child) in children.iter().enumerate() {
                    let from = if k == 0 { low } else { keys[k - 1] };
                    let to = keys.get(k).copied().or(high);
                    stack.push((child, Some(header.level - 1), from, to));
                }
            }
        }
        // Every used block is the tree's (no record or page leaked), and
        // no block of the tree's is free.
        let mut mine = self.reached()?;
        mine.extend(self.epochs.retired());
        for (block, _, used) in self.heap.blocks(&self.region)? {
            if used != mine.contains(&block) {
                return Err(Error::corruption(
                    self.region.path(),
                    block,
                    format!(
                        "block {block} is {} but {} the B3-tree's",
                        if used { "used" } else { "free" },
                        if used { "not" } else { "is" }
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Completes what a crash cut short (`repair`), then frees every
    /// block the tree does not reach by child and sibling links: a right
    /// half built for a split that never committed, a page built for a
    /// rebuild that never committed, and a rebuilt page not yet freed.
    fn recover(&self) -> Result<()> {
        self.repair()?;
        self.heap.recover(&self.region, &self.persist, &self.reached()?)
    }

    /// The blocks the tree reaches: its root object, the pages (by child
    /// and sibling links) and, in a bytes key tree, the records of their
    /// nodes and of their ranges' ends.
    fn reached(&self) -> Result<HashSet<u64>> {
        let mut reached: HashSet<u64> = [self.root.at].into();
        let mut stack = vec![self.root_page()];
        while let Some(at) = stack.pop() {
            if !reached.insert(at) {
                continue;
            }
            let page = self.page(at);
            let header = page.header(&self.region)?;
            if header.sibling != 0 {
                stack.push(header.sibling);
            }
            if header.level > 0 {
                stack.extend(page.children(&self.region)?);
            }
            if self.keys == Keys::Bytes {
                // (Every node's record: a leaf key's, a separator's; and
                // the range's ends, which are separators' too.)
                let records = page
                    .keys(&self.region)?
                    .into_iter()
                    .chain([header.high, header.low]);
                reached.extend(records.map(|key| key.record).filter(|&at| at != 0));
            }
        }
        Ok(reached)
    }

    /// Completes, page by page from the root, what a crash cut short:
    /// - a split's commit stopped between its two stores (the sibling
    ///   linked, the high key not yet the sibling's low key; see
    ///   [`settled`](Self::settled));
    /// - a split not yet pruned (nodes from the high key up);
    /// - a split whose separator the parent lacks: the parent gets its
    ///   node (above the root, a new root is published);
    /// - a rebuild cut short after its step 1: a parent's link left at the
    ///   rebuilt page's left sibling, for keys that sibling does not hold,
    ///   is pointed at the page right of the sibling (the old page, or the
    ///   new one if the commit was made);
    /// - a merge cut short before its commit: the keys grafted past the
    ///   page's high key are pruned (with a split's);
    /// - a merge cut short after its commit (a link whose page's range runs
    ///   past the link's): the parent's next link is pointed at the page
    ///   and the separator between them removed;
    /// - a separator's removal cut short (the separator twice): the lower
    ///   copy unlinked.
    ///
    /// Searches are right without any of it (they move right), but a later
    /// split or rebuild would not be.
    fn repair(&self) -> Result<()> {
        let root = self.page(self.root_page());
        let header = self.settled(root)?;
        if header.sibling != 0 {
            self.new_root(root, header.level + 1, (header.high, root.at, header.sibling))?;
        }
        let mut seen = HashSet::new();
        let mut stack = vec![self.root_page()];
        while let Some(at) = stack.pop() {
            if !seen.insert(at) {
                continue;
            }
            let page = self.page(at);
            let header = self.settled(page)?;
            let mut writing = self.latches.write(at);
            if let Some(high) = header.end() {
                if page.prune(&self.region, &self.persist, &self.key_of(high)?)? {
                    writing.forget();
                }
            }
            while page.undouble(&self.region, &self.persist)? {
                writing.forget();
            }
            drop(writing);
            if header.sibling != 0 {
                stack.push(header.sibling);
            }
            if header.level > 0 {
                while self.repair_link(page, &header)? {}
                stack.extend(page.children(&self.region)?);
            }
        }
        Ok(())
    }

    /// The header of `page`, its high key first made its sibling's low key
    /// where a split's commit stopped between its two stores.
    fn settled(&self, page: Page) -> Result<Header> {
        let mut header = page.header(&self.region)?;
        if header.sibling != 0 {
            let low = self.page(header.sibling).header(&self.region)?.low;
            if self.order(header.high, low)? != Order::Equal {
                let _writing = self.latches.write(page.at);
                page.set_high(&self.region, &self.persist, low);
                header.high = low;
            }
        }
        Ok(header)
    }

    /// Fixes the first link of the internal `page` that leads keys to a
    /// page whose range does not end where the link's does (see
    /// [`repair`](Self::repair)); returns whether there was one.
    fn repair_link(&self, page: Page, header: &Header) -> Result<bool> {
        let at = page.at;
        let corrupt = |what: String| {
            Err(Error::corruption(
                self.region.path(),
                at,
                format!("B3-tree page {at}: {what}"),
            ))
        };
        let separators = page.keys(&self.region)?;
        let children = page.children(&self.region)?;
        if children.len() != separators.len() + 1 {
            // (A separator's removal cut short is undone before: see
            // `Page::undouble`.)
            return corrupt(format!(
                "{} children for {} separators",
                children.len(),
                separators.len()
            ));
        }
        let same = |a, b| self.same(a, b);
        for (k, &child) in children.iter().enumerate() {
            // The keys the link leads: from `low` to `to`.
            let low = if k == 0 { header.low } else { separators[k - 1] };
            let to = separators.get(k).copied().or(header.end());
            let below = self.settled(self.page(child))?;
            let end = below.end();
            if same(end, to)? {
                continue;
            }
            let runs_past = match (to, end) {
                (Some(_), None) => true,
                (Some(to), Some(end)) => self.order(end, to)? == Order::Greater,
                (None, _) => false,
            };
            if let (true, Some(to)) = (runs_past, to) {
                // A merge cut short after its commit: the page took over
                // the range of the next link's page, whose separator (`to`)
                // this page still holds.
                let Some(&next) = children.get(k + 1) else {
                    return corrupt(format!(
                        "its last link leads to page {child}, whose keys run past its own"
                    ));
                };
                let to_key = self.key_of(to)?;
                let mut writing = self.latches.write(at);
                if next != child {
                    page.relink(&self.region, &self.persist, &to_key, next, child)?;
                }
                let free = writing.slots(page, &self.region)?;
                let removed = page.remove_separator(&self.region, &self.persist, free, &to_key, child)?;
                if !matches!(removed, Remove::Removed(_)) {
                    return corrupt(format!("separator {to:?} not removed ({removed:?})"));
                }
                return Ok(true);
            }
            let low_key = self.key_of(low)?;
            if low_key.order_stored(&self.region, below.high)? != Order::Less {
                // A rebuild cut short: the link is at the left sibling.
                let holder = self.page(below.sibling);
                let held = holder.header(&self.region)?;
                if !same(Some(held.low), Some(low))? {
                    return corrupt(format!(
                        "its link for keys from {low:?} leads to page {child}, whose right sibling starts at {:?}",
                        held.low
                    ));
                }
                let _writing = self.latches.write(at);
                page.relink(&self.region, &self.persist, &low_key, child, holder.at)?;
            } else {
                // A split whose separator this page lacks.
                if !same(Some(below.low), Some(low))? {
                    return corrupt(format!(
                        "its link for keys from {low:?} leads to page {child}, whose keys start at {:?}",
                        below.low
                    ));
                }
                self.add_separator(page, &low_key, (below.high, child, below.sibling))?;
            }
            return Ok(true);
        }
        Ok(false)
    }
}

/// Cuts `pairs` at the first pair from `from` on that `past` says lies
/// past the range; returns whether it cut.
fn cut(
    pairs: &mut Vec<(u64, u64)>,
    from: usize,
    mut past: impl FnMut(u64, u64) -> Result<bool>,
) -> Result<bool> {
    for (i, &(word, value)) in pairs.iter().enumerate().skip(from) {
        if past(word, value)? {
            pairs.truncate(i);
            return Ok(true);
        }
    }
    Ok(false)
}
