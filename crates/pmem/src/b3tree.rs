//! The B3-tree (seed 002 §4.1-4.3): a B+-tree of [`b3page`] pages, u64
//! keys to u64 values, on a region.
//!
//! This version takes one operation at a time (a mutex around the tree);
//! lock-free readers, per-page writer latches and merges of sparse pages
//! are still to come (see `DESIGN.md`).
//!
//! A page holds the keys from its low key up to its high key; past the high
//! key, a search moves right to the sibling (B-link). A full page splits by
//! copy-on-write, so that every step is one 8-byte store:
//! 1. its content (with the key that did not fit) is built whole into two
//!    new pages: the left one's sibling is the right one, and the
//!    separator is the left one's high key and the right one's low key;
//!    the right one takes the old page's sibling and high key;
//! 2. the old page has two links to it, its parent's and its left
//!    sibling's. The parent's is pointed at the left sibling (keys of the
//!    old page still reach it, moving right); then the left sibling's
//!    sibling link is pointed at the new left page: the commit;
//! 3. the parent's link is replaced by a node (separator; new left, new
//!    right), and the old page freed.
//!
//! The leftmost page of a level has only its parent's link: step 3 alone
//! commits. A root split builds a new root over the two halves and
//! publishes it with one store of the root word. A parent with no room
//! for the node splits first (a split never waits on its parent).
//!
//! Every state a crash leaves answers every search right (move-right
//! covers a parent's link left pointing at a left sibling); recovery
//! completes such a split and frees the blocks no page reaches.

use std::collections::{HashMap, HashSet};
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use spillway_core::{ensure, Error, Result};

use crate::b3page::{Header, Insert, Page, Remove};
use crate::heap::Heap;
use crate::persist::Persist;
use crate::region::Region;
use crate::tree::{self, RootObject};

/// The region kind of a B3-tree.
pub const KIND: &str = "b3tree";

/// The root object's magic.
const MAGIC: u64 = u64::from_le_bytes(*b"B3TREErt");

/// A tree's shape.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Bytes per page: a power of two from 512 (small pages make splits
    /// frequent in tests) to 64 KiB.
    pub page_bytes: u64,
    pub region_bytes: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            page_bytes: 4096,
            region_bytes: 1 << 30,
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
}

/// A B3-tree on a region.
#[derive(Debug)]
pub struct B3Tree<P: Persist> {
    region: Region,
    heap: Heap,
    persist: P,
    root: RootObject,
    page_bytes: u64,
    /// Nodes written per page, learnt from the media on a page's first
    /// write since the open (it is not persisted); its mutex is the
    /// tree's: one operation at a time.
    counts: Mutex<HashMap<u64, u32>>,
    /// A recovery is owed (the tree was not closed clean): made before the
    /// first write, the first check or the close, under the mutex. Reads
    /// need none (see [`attach`](B3Tree::attach)).
    repair: AtomicBool,
}

/// What takes a page's place: one page (a leaf rebuilt without its dead
/// nodes), or two halves and their separator.
#[derive(Debug, Clone, Copy)]
enum Replacement {
    One(u64),
    Two(u64, u64, u64),
}

/// One half of a split's content.
#[derive(Debug, Clone, Copy)]
enum Part<'a> {
    Leaf(&'a [(u64, u64)]),
    Internal(&'a [u64], &'a [u64]),
}

/// What a split page held, with the one more that did not fit.
enum Content {
    Leaf(Vec<(u64, u64)>),
    Internal {
        separators: Vec<u64>,
        children: Vec<u64>,
    },
}

impl<P: Persist> B3Tree<P> {
    /// Creates a tree in a new region file at `path`.
    pub fn create(path: &Path, options: Options, persist: P) -> Result<B3Tree<P>> {
        tree::check(&options)?;
        B3Tree::format(
            Region::create(path, options.region_bytes, KIND)?,
            options,
            persist,
        )
    }

    /// Creates a tree in memory (tests, the crash tester).
    pub fn in_memory(options: Options, persist: P) -> Result<B3Tree<P>> {
        tree::check(&options)?;
        B3Tree::format(Region::in_memory(options.region_bytes, KIND)?, options, persist)
    }

    /// Opens the tree in the region file at `path`, recovering it.
    pub fn open(path: &Path, persist: P) -> Result<B3Tree<P>> {
        B3Tree::attach(Region::open(path, KIND)?, persist)
    }

    fn format(region: Region, options: Options, persist: P) -> Result<B3Tree<P>> {
        let (heap, root) = RootObject::format(&region, &persist, MAGIC, options.page_bytes, |leaf| {
            let header = Header {
                level: 0,
                sibling: 0,
                high: 0,
                low: 0,
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
            region,
            heap,
            persist,
            root,
            page_bytes: root.page_bytes,
            counts: Mutex::new(HashMap::new()),
            repair: AtomicBool::new(false),
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
    pub fn close(self) -> Result<()> {
        drop(self.writing()?);
        self.heap.close(&self.region, &self.persist);
        self.region.sync()
    }

    /// Whether a recovery is owed (until the first write).
    pub fn owes_repair(&self) -> bool {
        self.repair.load(Ordering::Relaxed)
    }

    /// The turn of a write: the recovery owed made first.
    fn writing(&self) -> Result<MutexGuard<'_, HashMap<u64, u32>>> {
        let mut counts = self.turn();
        if self.repair.load(Ordering::Relaxed) {
            self.recover(&mut counts)?;
            self.repair.store(false, Ordering::Relaxed);
        }
        Ok(counts)
    }

    /// Its keys (a scan of the leaves).
    pub fn len(&self) -> Result<usize> {
        self.entries().map(|entries| entries.len())
    }

    /// Whether it holds no key.
    pub fn is_empty(&self) -> Result<bool> {
        self.range(.., 1).map(|first| first.is_empty())
    }

    /// Persistence counts and shape.
    pub fn stats(&self) -> Result<TreeStats> {
        let _turn = self.turn();
        let root = self.page(self.root_page()).header(&self.region)?;
        Ok(self.root.stats(&self.region, &self.persist, root.level))
    }

    /// The persistence mode (its counts; a trace).
    pub fn persist(&self) -> &P {
        &self.persist
    }

    /// The region (for images and statistics).
    pub fn region(&self) -> &Region {
        &self.region
    }

    fn turn(&self) -> MutexGuard<'_, HashMap<u64, u32>> {
        self.counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
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
    fn descend(&self, key: u64, level: u8) -> Result<(u64, Vec<u64>)> {
        let mut at = self.root_page();
        let mut path = Vec::new();
        for _ in 0..=self.region.len() / self.page_bytes {
            let page = self.page(at);
            page.prefetch(&self.region);
            let header = page.header(&self.region)?;
            if header.sibling != 0 && key >= header.high {
                at = header.sibling;
                continue;
            }
            if header.level <= level {
                return Ok((at, path));
            }
            path.push(at);
            at = page.child_for(&self.region, key)?;
        }
        Err(Error::corruption(
            self.region.path(),
            at,
            "a B3-tree descent that never ends",
        ))
    }

    /// The value of `key`.
    pub fn get(&self, key: u64) -> Result<Option<u64>> {
        let _turn = self.turn();
        let (leaf, _) = self.descend(key, 0)?;
        self.page(leaf).get(&self.region, key)
    }

    /// Sets `key` to `value`; returns the value it replaced.
    pub fn insert(&self, key: u64, value: u64) -> Result<Option<u64>> {
        let mut counts = self.writing()?;
        loop {
            let (leaf, path) = self.descend(key, 0)?;
            let page = self.page(leaf);
            let count = self.count(&mut counts, page)?;
            match page.insert(&self.region, &self.persist, count, key, value)? {
                Insert::Replaced(old) => return Ok(Some(old)),
                Insert::Added => return Ok(None),
                Insert::Full => {
                    let mut pairs = page.pairs(&self.region)?;
                    let at = pairs.partition_point(|&(k, _)| k < key);
                    pairs.insert(at, (key, value));
                    // A page full of removed nodes is rebuilt, not split
                    // (the seed's lazy defragmentation).
                    if pairs.len() <= 3 * Page::capacity(self.page_bytes) as usize / 4 {
                        self.rebuild(&mut counts, page, &path, &pairs)?;
                        return Ok(None);
                    }
                    if self.split(&mut counts, page, &path, Content::Leaf(pairs))? {
                        return Ok(None);
                    }
                    // A parent split first: the descent again.
                }
            }
        }
    }

    /// Removes `key`; returns its value.
    pub fn remove(&self, key: u64) -> Result<Option<u64>> {
        let mut counts = self.writing()?;
        let mut removed = None;
        // Until the key is absent: a removal cut short by a crash can
        // leave it twice in its page (see `Page::remove`).
        loop {
            let (leaf, path) = self.descend(key, 0)?;
            let page = self.page(leaf);
            let count = self.count(&mut counts, page)?;
            match page.remove(&self.region, &self.persist, count, key)? {
                Remove::Removed(value) => {
                    removed.get_or_insert(value);
                }
                Remove::Absent => return Ok(removed),
                Remove::Full => {
                    let mut pairs = page.pairs(&self.region)?;
                    let at = pairs.partition_point(|&(k, _)| k < key);
                    let (_, value) = pairs.remove(at);
                    self.rebuild(&mut counts, page, &path, &pairs)?;
                    removed.get_or_insert(value);
                }
            }
        }
    }

    /// Puts a leaf holding `pairs` in the place of `page` (reached through
    /// `path`), with its range and sibling: a leaf full of removed nodes
    /// rebuilt.
    fn rebuild(
        &self,
        counts: &mut HashMap<u64, u32>,
        page: Page,
        path: &[u64],
        pairs: &[(u64, u64)],
    ) -> Result<()> {
        let header = page.header(&self.region)?;
        let new = self.alloc()?;
        self.build(counts, new, header, Part::Leaf(pairs));
        self.persist.fence();
        match path.last() {
            None => self.set_root_page(new),
            Some(&parent) => self.replace(counts, page, header, self.page(parent), Replacement::One(new))?,
        }
        self.free_page(counts, page);
        Ok(())
    }

    /// Publishes `page` as the root: one store of the root word.
    fn set_root_page(&self, page: u64) {
        self.root.set_page(&self.region, &self.persist, page);
    }

    /// Frees a page no link reaches any more.
    fn free_page(&self, counts: &mut HashMap<u64, u32>, page: Page) {
        counts.remove(&page.at);
        self.heap.free(&self.region, &self.persist, page.at);
    }

    /// The count of nodes written in `page`, read from the media the first
    /// time.
    fn count<'a>(&self, counts: &'a mut HashMap<u64, u32>, page: Page) -> Result<&'a mut u32> {
        if let std::collections::hash_map::Entry::Vacant(entry) = counts.entry(page.at) {
            entry.insert(page.count(&self.region)?);
        }
        Ok(counts.get_mut(&page.at).expect("just counted"))
    }

    /// An internal page's content as it is.
    fn content(&self, page: Page) -> Result<Content> {
        Ok(Content::Internal {
            separators: page.keys(&self.region)?,
            children: page.children(&self.region)?,
        })
    }

    /// Splits `page` (reached through `path`) into two holding `content`.
    /// Returns false, having split nothing of `page`, when its parent had
    /// no room for the separator and was split first.
    fn split(
        &self,
        counts: &mut HashMap<u64, u32>,
        page: Page,
        path: &[u64],
        content: Content,
    ) -> Result<bool> {
        if let Some((&parent, above)) = path.split_last() {
            let parent = self.page(parent);
            if *self.count(counts, parent)? >= Page::capacity(self.page_bytes) {
                // (Or its own parent first: the caller descends again
                // either way, since the path has changed.)
                let parent_content = self.content(parent)?;
                self.split(counts, parent, above, parent_content)?;
                return Ok(false);
            }
        }
        let header = page.header(&self.region)?;
        let (left, right) = (self.alloc()?, self.alloc()?);
        // The separator, and each half's content: a leaf's pairs split in
        // two; an internal page's median separator moves up, and each half
        // keeps its own separators and children.
        let (separator, left_content, right_content) = match &content {
            Content::Leaf(pairs) => {
                let mid = pairs.len() / 2;
                (pairs[mid].0, Part::Leaf(&pairs[..mid]), Part::Leaf(&pairs[mid..]))
            }
            Content::Internal { separators, children } => {
                let mid = separators.len() / 2;
                (
                    separators[mid],
                    Part::Internal(&separators[..mid], &children[..=mid]),
                    Part::Internal(&separators[mid + 1..], &children[mid + 1..]),
                )
            }
        };
        let left_header = Header {
            sibling: right,
            high: separator,
            ..header
        };
        let right_header = Header {
            low: separator,
            ..header
        };
        self.build(counts, left, left_header, left_content);
        self.build(counts, right, right_header, right_content);
        self.persist.fence();
        match path.last() {
            None => self.new_root(counts, page, header.level + 1, (separator, left, right))?,
            Some(&parent) => self.replace(
                counts,
                page,
                header,
                self.page(parent),
                Replacement::Two(separator, left, right),
            )?,
        }
        self.free_page(counts, page);
        Ok(true)
    }

    /// Writes the page at `at` holding `part`, its count noted.
    fn build(&self, counts: &mut HashMap<u64, u32>, at: u64, header: Header, part: Part<'_>) {
        let (region, persist, page) = (&self.region, &self.persist, self.page(at));
        let count = match part {
            Part::Leaf(pairs) => Page::build_leaf(region, persist, page, header, pairs),
            Part::Internal(separators, children) => {
                Page::build_internal(region, persist, page, header, separators, children)
            }
        };
        counts.insert(at, count);
    }

    fn alloc(&self) -> Result<u64> {
        self.heap.alloc(&self.region, &self.persist, self.page_bytes)
    }

    /// A root split: a new root over the halves, published by one store.
    fn new_root(
        &self,
        counts: &mut HashMap<u64, u32>,
        old: Page,
        level: u8,
        (separator, left, right): (u64, u64, u64),
    ) -> Result<()> {
        ensure!(
            self.root_page() == old.at,
            Internal,
            "the B3-tree's root moved under a split"
        );
        let root = self.alloc()?;
        let header = Header {
            level,
            sibling: 0,
            high: 0,
            low: 0,
        };
        self.build(counts, root, header, Part::Internal(&[separator], &[left, right]));
        self.persist.fence();
        self.set_root_page(root);
        Ok(())
    }

    /// Puts `new` in the place of `old`: steps 2 and 3 of the module's
    /// split (for one page, step 3 points the parent's link at it).
    fn replace(
        &self,
        counts: &mut HashMap<u64, u32>,
        old: Page,
        header: Header,
        parent: Page,
        new: Replacement,
    ) -> Result<()> {
        let first = match new {
            Replacement::One(page) => page,
            Replacement::Two(_, left, _) => left,
        };
        // The child the parent's link for the old page's keys leads to: the
        // old page, or (after a crash cut a split short) a page left of it.
        let mut from = parent.child_for(&self.region, header.low)?;
        if header.low != 0 {
            let (left_sibling, _) = self.descend(header.low - 1, header.level)?;
            let sibling = self.page(left_sibling);
            ensure!(
                sibling.header(&self.region)?.sibling == old.at,
                Internal,
                "B3-tree page {}: the page left of {} links elsewhere",
                left_sibling,
                old.at
            );
            if from == old.at {
                parent.relink(&self.region, &self.persist, header.low, old.at, left_sibling)?;
                from = left_sibling;
            }
            sibling.set_sibling(&self.region, &self.persist, first);
        }
        let Replacement::Two(separator, left, right) = new else {
            return parent.relink(&self.region, &self.persist, header.low, from, first);
        };
        let count = self.count(counts, parent)?;
        let halves = (separator, left, right);
        let placed = parent.replace_child(&self.region, &self.persist, count, header.low, from, halves)?;
        ensure!(
            placed,
            Internal,
            "B3-tree page {}: no room for a split's node, though a full parent splits first",
            parent.at
        );
        Ok(())
    }

    /// Every (key, value) in key order.
    pub fn entries(&self) -> Result<Vec<(u64, u64)>> {
        self.range(.., usize::MAX)
    }

    /// The (key, value) pairs with keys in `keys`, in key order, at most
    /// `limit` of them: the leaf of the range's start, then its siblings.
    pub fn range(&self, keys: impl RangeBounds<u64>, limit: usize) -> Result<Vec<(u64, u64)>> {
        self.scan(keys, limit, true)
    }

    /// As [`range`](Self::range), in reverse key order from the range's
    /// end: the leaf of the range's end, then the leaves left of it, each
    /// found by a descent to the key below its low key (a page links only
    /// to its right sibling).
    pub fn range_rev(&self, keys: impl RangeBounds<u64>, limit: usize) -> Result<Vec<(u64, u64)>> {
        self.scan(keys, limit, false)
    }

    fn scan(&self, keys: impl RangeBounds<u64>, limit: usize, forward: bool) -> Result<Vec<(u64, u64)>> {
        let _turn = self.turn();
        let bound = if forward {
            tree::first_key(&keys)
        } else {
            tree::last_key(&keys)
        };
        let Some(bound) = bound else {
            return Ok(Vec::new());
        };
        let (mut at, _) = self.descend(bound, 0)?;
        let mut pairs = Vec::new();
        loop {
            let page = self.page(at);
            page.prefetch_all(&self.region);
            let mut more = true;
            page.each_from(&self.region, bound, forward, |key, value| {
                more = keys.contains(&key) && pairs.len() < limit;
                if more {
                    pairs.push((key, value));
                }
                more
            })?;
            let header = page.header(&self.region)?;
            match (more, forward) {
                (true, true) if header.sibling != 0 => at = header.sibling,
                // (Only a level's leftmost page has the low key 0.)
                (true, false) if header.low != 0 => at = self.descend(header.low - 1, 0)?.0,
                _ => return Ok(pairs),
            }
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
        let mut stack = vec![(root, None, 0, None)];
        while let Some((at, level, low, high)) = stack.pop() {
            let bad = |what: String| {
                Err(Error::corruption(
                    self.region.path(),
                    at,
                    format!("B3-tree page {at}: {what}"),
                ))
            };
            let page = self.page(at);
            let header = page.header(&self.region)?;
            let ends = header.end();
            if level.is_some_and(|level| header.level != level) || header.low != low || ends != high {
                return bad(format!(
                    "level {}, keys from {} to {ends:?}, where its parent leads keys from {low} to {high:?} at level {level:?}",
                    header.level, header.low
                ));
            }
            let keys = page.keys(&self.region)?;
            let inside = |key: u64| key >= low && high.is_none_or(|high| key < high);
            if !keys.iter().all(|&key| inside(key)) || !keys.is_sorted() {
                return bad(format!("keys outside {low}..{high:?}"));
            }
            if header.level > 0 {
                let children = page.children(&self.region)?;
                for (k, &child) in children.iter().enumerate() {
                    let from = if k == 0 { low } else { keys[k - 1] };
                    let to = keys.get(k).copied().or(high);
                    stack.push((child, Some(header.level - 1), from, to));
                }
            }
        }
        Ok(())
    }

    /// Completes a split cut short (`repair_links`), then frees every
    /// block the tree does not reach by child and sibling links: pages
    /// built for a split that never committed, and a split page not yet
    /// freed.
    fn recover(&self, counts: &mut HashMap<u64, u32>) -> Result<()> {
        self.repair_links(counts)?;
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
        }
        self.heap.recover(&self.region, &self.persist, &reached)
    }

    /// Completes a split cut short after its step 2: a parent's link left
    /// at the split page's left sibling, for keys that sibling does not
    /// hold. Searches are right without it (they move right), but a later
    /// split of that sibling would leave the link at a freed page. The
    /// page right of the sibling is the old page (the commit was not
    /// made: the link goes back to it) or the new left half (the commit
    /// was made: the link becomes step 3's node over the two halves).
    fn repair_links(&self, counts: &mut HashMap<u64, u32>) -> Result<()> {
        let mut seen = HashSet::new();
        let mut stack = vec![self.root_page()];
        while let Some(at) = stack.pop() {
            if !seen.insert(at) {
                continue;
            }
            let page = self.page(at);
            let header = page.header(&self.region)?;
            if header.sibling != 0 {
                stack.push(header.sibling);
            }
            if header.level == 0 {
                continue;
            }
            let separators = page.keys(&self.region)?;
            let high = header.end();
            for (k, child) in page.children(&self.region)?.into_iter().enumerate() {
                stack.push(child);
                // The keys the link leads: from `low` to `to`.
                let low = if k == 0 { header.low } else { separators[k - 1] };
                let to = separators.get(k).copied().or(high);
                let below = self.page(child).header(&self.region)?;
                if below.sibling == 0 || low < below.high {
                    continue;
                }
                let holder = self.page(below.sibling);
                let held = holder.header(&self.region)?;
                if held.low != low {
                    return Err(Error::corruption(
                        self.region.path(),
                        at,
                        format!("B3-tree page {at}: its link for keys from {low} leads to page {child}, whose right sibling starts at {}", held.low),
                    ));
                }
                if held.end() == to {
                    page.relink(&self.region, &self.persist, low, child, holder.at)?;
                } else {
                    let count = self.count(counts, page)?;
                    let halves = (held.high, holder.at, held.sibling);
                    let placed =
                        page.replace_child(&self.region, &self.persist, count, low, child, halves)?;
                    ensure!(
                        placed,
                        Internal,
                        "B3-tree page {at}: no room for a split's node it had room for"
                    );
                }
                stack.push(holder.at);
            }
        }
        Ok(())
    }
}
