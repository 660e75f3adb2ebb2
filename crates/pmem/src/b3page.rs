//! A B3-tree page (seed 002 §4.1): a block of persistent memory holding a
//! binary search tree of nodes, so that an insert writes one new node and
//! commits it with one 8-byte link, instead of shifting a sorted array.
//!
//! A page is a heap block of `bytes` (a power of two). Its first line is
//! the header; nodes of 32 bytes follow, two to a line, written in order
//! (append only: a node's slot is reused only when the page is rebuilt):
//!
//! | bytes | header field |
//! |---|---|
//! | 0..8 | meta: `0xB3` in the top byte, the level (0: a leaf) in the low byte |
//! | 8..16 | the link to the BST's root node (0: an empty page) |
//! | 16..24 | the right sibling page (0: none) |
//! | 24..32 | the high key: keys from it up live in the sibling (when there is one) |
//! | 32..40 | the low key: the page holds keys from it up (0 for the leftmost page of a level: a separator is never 0) |
//! | 40..48 | a bytes key tree's: the high key's record |
//! | 48..56 | a bytes key tree's: the low key's record (0 for a level's leftmost page) |
//!
//! | bytes | node field |
//! |---|---|
//! | 0..8 | key (a bytes key's word: see [`Key`]) |
//! | 8..16 | value (a leaf's; unused in an internal page); in a bytes key tree, the key's record (a leaf's with its value) |
//! | 16..24 | left link: keys below the node's |
//! | 24..32 | right link: keys above the node's (an internal page's: from the node's key up) |
//!
//! A link word is 0 (none), odd for node `i` of this page (`2i + 1`), or
//! even and not 0 for a child page's offset. A leaf's links are nodes or
//! none; an internal page's BST ends in child pages, never in none (n
//! separator nodes, n + 1 children).
//!
//! In a tree of bytes keys, a key is stored as its word (its first eight
//! bytes, big-endian, zero-padded: words order as the keys do where they
//! differ) and a record of its bytes ([`record`](crate::record)); only keys
//! whose words tie read their records.
//!
//! Which node slots are free is kept in DRAM by the caller ([`Slots`]),
//! not on the media: a slot no link reaches is free (a removed node, a
//! pruned one, a node a crash wrote but never linked), and is reused.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::sync::atomic::AtomicU64;

use spillway_core::{Error, Result};

use crate::persist::Persist;
use crate::record;
use crate::region::{Region, LINE};

/// Bytes of a page's header.
pub const HEADER: u64 = LINE;

/// Bytes of a node.
pub const NODE: u64 = 32;

const META: u64 = 0;
const ROOT: u64 = 8;
const SIBLING: u64 = 16;
const HIGH: u64 = 24;
const LOW: u64 = 32;
const HIGH_RECORD: u64 = 40;
const LOW_RECORD: u64 = 48;

const KEY: u64 = 0;
const VALUE: u64 = 8;
const LEFT: u64 = 16;
const RIGHT: u64 = 24;

/// Lines of nodes [`Page::prefetch`] asks for: the BST's top five levels
/// (31 nodes; a 1 KiB page whole). Four levels were slower, six no faster
/// (see `DESIGN.md`).
const PREFETCH_LINES: u64 = 15;

/// The meta word's top byte, telling a page from anything else.
const TAG: u64 = 0xB3 << 56;

/// A key as a page stores it: its word (a u64 key itself; a bytes key's
/// first eight bytes, big-endian and zero-padded) and a bytes key's record
/// (0 for a u64 key, and for the low key of a level's leftmost page).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stored {
    pub word: u64,
    pub record: u64,
}

impl Stored {
    /// A level's leftmost page's low key: none (every key is from it up).
    pub const NONE: Stored = Stored { word: 0, record: 0 };

    fn at(pair: (u64, u64)) -> Stored {
        Stored {
            word: pair.0,
            record: pair.1,
        }
    }
}

/// A key as a search compares it with the keys pages store: its word, a
/// bytes key's bytes (compared with a stored key's record where the words
/// tie), and where it falls among keys equal to it (`tie`: `Equal` for the
/// key itself, `Less` just below it, `Greater` just above it; a key with
/// no bytes in a bytes key tree falls by its tie among every key of its
/// word: [`top`](Key::top) above them all).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key<'a> {
    pub word: u64,
    pub bytes: Option<Cow<'a, [u8]>>,
    pub tie: Ordering,
}

impl<'a> Key<'a> {
    /// A u64 key.
    pub fn number(word: u64) -> Key<'static> {
        Key {
            word,
            bytes: None,
            tie: Ordering::Equal,
        }
    }

    /// A bytes key.
    pub fn bytes(bytes: impl Into<Cow<'a, [u8]>>) -> Key<'a> {
        let bytes = bytes.into();
        Key {
            word: word_of(&bytes),
            bytes: Some(bytes),
            tie: Ordering::Equal,
        }
    }

    /// Above every key (a reverse scan's start with no end).
    pub fn top() -> Key<'static> {
        Key {
            word: u64::MAX,
            bytes: None,
            tie: Ordering::Greater,
        }
    }

    /// The key, owning its bytes.
    pub fn into_owned(self) -> Key<'static> {
        Key {
            word: self.word,
            bytes: self.bytes.map(|bytes| Cow::Owned(bytes.into_owned())),
            tie: self.tie,
        }
    }

    /// Just below this key: above every key below it.
    pub fn below(self) -> Key<'a> {
        Key {
            tie: Ordering::Less,
            ..self
        }
    }

    /// Just above this key: below every key above it.
    pub fn above(self) -> Key<'a> {
        Key {
            tie: Ordering::Greater,
            ..self
        }
    }

    /// How this key orders against the stored key `(word, record)`:
    /// by words, and where they tie by a bytes key's bytes against the
    /// record's (record 0: the empty key).
    #[inline(always)]
    pub fn order(&self, region: &Region, word: u64, record: u64) -> Result<Ordering> {
        self.order_with(region, word, || record)
    }

    /// [`order`](Self::order), the record read only where the words tie
    /// (a load saved on every node a search passes).
    #[inline(always)]
    fn order_with(&self, region: &Region, word: u64, record: impl FnOnce() -> u64) -> Result<Ordering> {
        if self.word != word {
            return Ok(self.word.cmp(&word));
        }
        let order = match &self.bytes {
            None => Ordering::Equal,
            Some(bytes) => match record() {
                0 => bytes.len().cmp(&0),
                record => record::compare(region, bytes, record)?,
            },
        };
        Ok(order.then(self.tie))
    }

    /// [`order`](Self::order) against a stored key.
    pub fn order_stored(&self, region: &Region, stored: Stored) -> Result<Ordering> {
        self.order(region, stored.word, stored.record)
    }
}

/// A bytes key's word: its first eight bytes, big-endian, zero-padded.
pub fn word_of(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    let len = bytes.len().min(8);
    word[..len].copy_from_slice(&bytes[..len]);
    u64::from_be_bytes(word)
}

/// Where a link word points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    None,
    /// Node `i` of the same page.
    Node(u32),
    /// A child page, by its offset.
    Page(u64),
}

impl Link {
    fn decode(word: u64) -> Link {
        if word == 0 {
            Link::None
        } else if word & 1 == 1 {
            Link::Node((word >> 1) as u32)
        } else {
            Link::Page(word)
        }
    }

    fn encode(self) -> u64 {
        match self {
            Link::None => 0,
            Link::Node(i) => (u64::from(i) << 1) | 1,
            Link::Page(at) => {
                assert!(at != 0 && at % LINE == 0, "a child page at {at}, not a line");
                at
            }
        }
    }
}

/// What [`Page::insert`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Insert {
    /// The key was there: its old value, replaced by one 8-byte store.
    Replaced(u64),
    /// A new node, linked.
    Added,
    /// No slot left: the caller splits the page.
    Full,
}

/// What [`Page::remove`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Remove {
    /// The key's node is unlinked: its value.
    Removed(u64),
    Absent,
    /// No slot left for the copy of its successor: the caller splits the
    /// page, then removes the key.
    Full,
}

/// A page's node slots, kept in DRAM by the caller (never on the media,
/// see [`Page::slots`]): the slots from `next` up were never written since
/// the page was built; `free` lists those below it that no link reaches.
/// A slot is released only once the store that unlinked it is durable, so
/// that reusing it never overwrites a node a crash image could reach.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Slots {
    pub next: u32,
    pub free: Vec<u32>,
}

impl Slots {
    /// A page built whole with `count` nodes.
    pub fn built(count: u32) -> Slots {
        Slots {
            next: count,
            free: Vec::new(),
        }
    }

    /// Slots in use: nodes linked.
    pub fn used(&self) -> u32 {
        self.next - self.free.len() as u32
    }

    /// Whether a page of `capacity` slots has none free.
    pub fn full(&self, capacity: u32) -> bool {
        self.free.is_empty() && self.next >= capacity
    }

    /// A free slot: `beside` if it is free (the slot sharing a line with
    /// the node whose link the new node takes: node and link then persist
    /// with one flush), else any.
    fn take(&mut self, capacity: u32, beside: Option<u32>) -> Option<u32> {
        if let Some(mate) = beside {
            if let Some(i) = self.free.iter().position(|&slot| slot == mate) {
                return Some(self.free.swap_remove(i));
            }
            if mate == self.next && mate < capacity {
                self.next += 1;
                return Some(mate);
            }
        }
        self.free.pop().or_else(|| {
            (self.next < capacity).then(|| {
                self.next += 1;
                self.next - 1
            })
        })
    }

    fn release(&mut self, slot: u32) {
        debug_assert!(slot < self.next && !self.free.contains(&slot));
        self.free.push(slot);
    }
}

/// A page: its offset in the region and its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Page {
    pub at: u64,
    pub bytes: u64,
}

/// A page's header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub level: u8,
    pub sibling: u64,
    pub high: Stored,
    pub low: Stored,
}

impl Header {
    /// Where the page's keys end (excluded): its high key, or none for
    /// the last page of a level.
    pub fn end(&self) -> Option<Stored> {
        (self.sibling != 0).then_some(self.high)
    }
}

impl Page {
    /// Nodes a page of `bytes` holds.
    pub fn capacity(bytes: u64) -> u32 {
        ((bytes - HEADER) / NODE) as u32
    }

    fn node_at(self, node: u32) -> u64 {
        self.at + HEADER + NODE * u64::from(node)
    }

    fn word(self, region: &Region, at: u64) -> u64 {
        region.word(at).load(std::sync::atomic::Ordering::Acquire)
    }

    fn corrupt(self, region: &Region, at: u64, what: String) -> Error {
        Error::corruption(region.path(), at, format!("B3-tree page {}: {what}", self.at))
    }

    /// A walk longer than the page's nodes: a damaged page.
    fn cycle(self, region: &Region) -> Error {
        self.corrupt(
            region,
            self.at,
            "its tree is deeper than its nodes: a cycle".into(),
        )
    }

    /// Asks memory for the page's header and first lines of nodes at once:
    /// the top levels of a built page's BST (breadth-first), which every
    /// search of the page reads, arrive together instead of one miss after
    /// another.
    pub fn prefetch(self, region: &Region) {
        for line in 0..=PREFETCH_LINES.min(self.bytes / LINE - 1) {
            region.prefetch(self.at + LINE * line);
        }
    }

    /// The page's level (0: a leaf), its tag checked.
    pub fn level(self, region: &Region) -> Result<u8> {
        let meta = self.word(region, self.at + META);
        if meta & (0xff << 56) != TAG {
            return Err(self.corrupt(region, self.at, format!("no page tag in its meta word {meta:#x}")));
        }
        Ok((meta & 0xff) as u8)
    }

    /// Where a search for `key` goes from this page, read without the
    /// whole header: right, to the sibling (`Some`), where `key` is past
    /// the page's keys; else `None`.
    #[inline(always)]
    pub fn past(self, region: &Region, key: &Key<'_>) -> Result<Option<u64>> {
        let sibling = self.word(region, self.at + SIBLING);
        if sibling == 0 {
            return Ok(None);
        }
        let order = key.order_with(region, self.word(region, self.at + HIGH), || {
            self.word(region, self.at + HIGH_RECORD)
        })?;
        Ok((order != Ordering::Less).then_some(sibling))
    }

    /// The header, its tag checked.
    pub fn header(self, region: &Region) -> Result<Header> {
        Ok(Header {
            level: self.level(region)?,
            sibling: self.word(region, self.at + SIBLING),
            high: Stored {
                word: self.word(region, self.at + HIGH),
                record: self.word(region, self.at + HIGH_RECORD),
            },
            low: Stored {
                word: self.word(region, self.at + LOW),
                record: self.word(region, self.at + LOW_RECORD),
            },
        })
    }

    /// Follows `link` (read at `from` in this page) to a node, checking
    /// that the node is inside the page; a child page is no node (allowed
    /// in an internal page only: `internal`).
    fn node(self, region: &Region, link: Link, from: u64, internal: bool) -> Result<Option<u32>> {
        match link {
            Link::None if !internal => Ok(None),
            Link::Page(_) if internal => Ok(None),
            Link::Node(node) if node < Page::capacity(self.bytes) => Ok(Some(node)),
            other => Err(self.corrupt(
                region,
                from,
                format!(
                    "a link to {other:?} in a {} page",
                    if internal { "internal" } else { "leaf" }
                ),
            )),
        }
    }

    /// The offset of the link word that holds `key`'s node, or would hold
    /// it (a leaf's), and the node if it is there (in a leaf, or an
    /// `internal` page's separators). Bounded by the page's capacity, so a
    /// damaged page with a cycle is reported, not followed for ever.
    fn descend(self, region: &Region, key: &Key<'_>, internal: bool) -> Result<(u64, Option<u32>)> {
        let mut link_at = self.at + ROOT;
        for _ in 0..=Page::capacity(self.bytes) {
            let Some(node) = self.node(
                region,
                Link::decode(self.word(region, link_at)),
                link_at,
                internal,
            )?
            else {
                return Ok((link_at, None));
            };
            let at = self.node_at(node);
            link_at = at
                + match self.order(region, key, at)? {
                    Ordering::Equal => return Ok((link_at, Some(node))),
                    Ordering::Less => LEFT,
                    Ordering::Greater => RIGHT,
                };
        }
        Err(self.cycle(region))
    }

    /// How `key` orders against the key of the node at `at`.
    #[inline(always)]
    fn order(self, region: &Region, key: &Key<'_>, at: u64) -> Result<Ordering> {
        key.order_with(region, self.word(region, at + KEY), || {
            self.word(region, at + VALUE)
        })
    }

    /// The value of `key` in a leaf (a bytes key's record).
    pub fn get(self, region: &Region, key: &Key<'_>) -> Result<Option<u64>> {
        let (_, node) = self.descend(region, key, false)?;
        Ok(node.map(|node| self.word(region, self.node_at(node) + VALUE)))
    }

    /// Sets `key` to `value` in a leaf (the caller holds the page, and
    /// `count` is its count of nodes written). A new node is written in
    /// the next slot and made durable, then committed by one 8-byte store
    /// of the link that reaches it, made durable too: two flushes, or one
    /// where node and link share a line.
    pub fn insert(
        self,
        region: &Region,
        persist: &impl Persist,
        slots: &mut Slots,
        key: &Key<'_>,
        value: u64,
    ) -> Result<Insert> {
        let (link_at, node) = self.descend(region, key, false)?;
        if let Some(node) = node {
            let at = self.node_at(node) + VALUE;
            let old = self.word(region, at);
            persist.persist_word(region, at, value);
            return Ok(Insert::Replaced(old));
        }
        Ok(
            if self.append(region, persist, slots, link_at, [key.word, value, 0, 0]) {
                Insert::Added
            } else {
                Insert::Full
            },
        )
    }

    /// The offset of the link word that leads an internal page's search
    /// for `key` to a child page, and that child. Bounded as
    /// [`descend`](Self::descend) is.
    fn fringe(self, region: &Region, key: &Key<'_>) -> Result<(u64, u64)> {
        let mut link_at = self.at + ROOT;
        for _ in 0..=Page::capacity(self.bytes) {
            match Link::decode(self.word(region, link_at)) {
                Link::Page(child) => return Ok((link_at, child)),
                link => {
                    let node = self.node(region, link, link_at, true)?.expect("a node");
                    let at = self.node_at(node);
                    link_at = at
                        + if self.order(region, key, at)? == Ordering::Less {
                            LEFT
                        } else {
                            RIGHT
                        };
                }
            }
        }
        Err(self.cycle(region))
    }

    /// The child page of an internal page that holds `key`.
    pub fn child_for(self, region: &Region, key: &Key<'_>) -> Result<u64> {
        self.fringe(region, key).map(|(_, child)| child)
    }

    /// An internal page's children, in key order (the ends of its BST,
    /// left to right).
    pub fn children(self, region: &Region) -> Result<Vec<u64>> {
        let mut children = Vec::new();
        let mut stack = vec![(Link::decode(self.word(region, self.at + ROOT)), self.at + ROOT)];
        while let Some((link, from)) = stack.pop() {
            if let Link::Page(child) = link {
                children.push(child);
                continue;
            }
            let node = self
                .node(region, link, from, true)?
                .expect("a node: pages handled above");
            if children.len() + stack.len() > Page::capacity(self.bytes) as usize + 1 {
                return Err(self.corrupt(region, self.at, "more children reached than it holds".into()));
            }
            let at = self.node_at(node);
            // (Right pushed first: the left subtree comes off the stack first.)
            stack.push((Link::decode(self.word(region, at + RIGHT)), at + RIGHT));
            stack.push((Link::decode(self.word(region, at + LEFT)), at + LEFT));
        }
        Ok(children)
    }

    /// Points the link of an internal page that leads `key` to the child
    /// `from` at `to` instead (one 8-byte store, flushed and fenced): how a
    /// split child's replacement is published. Errors if `key` does not
    /// lead to `from`.
    pub fn relink(
        self,
        region: &Region,
        persist: &impl Persist,
        key: &Key<'_>,
        from: u64,
        to: u64,
    ) -> Result<()> {
        let link_at = self.link_to(region, key, from)?;
        persist.persist_word(region, link_at, Link::Page(to).encode());
        Ok(())
    }

    /// The link word where `key` leads an internal page's search to the
    /// child `from`; an error if it leads elsewhere.
    fn link_to(self, region: &Region, key: &Key<'_>, from: u64) -> Result<u64> {
        let (link_at, child) = self.fringe(region, key)?;
        if child != from {
            return Err(Error::Internal(format!(
                "B3-tree page {}: key {key:?} leads to child {child}, not {from}",
                self.at
            )));
        }
        Ok(link_at)
    }

    /// Points the page's sibling link at `sibling` (one 8-byte store,
    /// flushed and fenced): the commit of a rebuild of the page to its
    /// right.
    pub fn set_sibling(self, region: &Region, persist: &impl Persist, sibling: u64) {
        persist.persist_word(region, self.at + SIBLING, sibling);
    }

    /// Replaces the child `from`, where `key` leads to it in an internal
    /// page, with a new node: the separator `separator` between the pages
    /// `left` and `right` (a split's halves). The node is made durable,
    /// then committed by one 8-byte store over the link. Returns false
    /// when the page is full; errors if `key` does not lead to `from`.
    pub fn replace_child(
        self,
        region: &Region,
        persist: &impl Persist,
        slots: &mut Slots,
        key: &Key<'_>,
        from: u64,
        (separator, left, right): (Stored, u64, u64),
    ) -> Result<bool> {
        let link_at = self.link_to(region, key, from)?;
        let node = [
            separator.word,
            separator.record,
            Link::Page(left).encode(),
            Link::Page(right).encode(),
        ];
        Ok(self.append(region, persist, slots, link_at, node))
    }

    /// Writes `node` ([key, value, left, right] words) in the next free
    /// slot and makes it durable, then links it at `link_at` (the commit).
    /// Returns false, writing nothing, when the page has no free slot.
    fn append(
        self,
        region: &Region,
        persist: &impl Persist,
        slots: &mut Slots,
        link_at: u64,
        node: [u64; 4],
    ) -> bool {
        // (Nodes `2k` and `2k + 1` share a line; the root link shares the
        // header's with none.)
        let beside = link_at
            .checked_sub(self.at + HEADER)
            .map(|offset| (offset / NODE) as u32 ^ 1);
        let Some(slot) = slots.take(Page::capacity(self.bytes), beside) else {
            return false;
        };
        let at = self.node_at(slot);
        for (field, word) in [KEY, VALUE, LEFT, RIGHT].into_iter().zip(node) {
            persist.store(region, at + field, word);
        }
        self.commit(region, persist, at, link_at, slot);
        true
    }

    /// Makes the node written at `at` durable, then links it at `link_at`,
    /// durably. (In one line, stores persist in program order: there the
    /// link cannot be durable before the node, and one flush does.)
    fn commit(self, region: &Region, persist: &impl Persist, at: u64, link_at: u64, node: u32) {
        if at / LINE != link_at / LINE {
            persist.flush(region, at, NODE);
            persist.fence();
        }
        persist.store(region, link_at, Link::Node(node).encode());
        persist.flush(region, link_at, 8);
        persist.fence();
    }

    /// Removes `key` from a leaf (the caller holds the page). Its node is
    /// unlinked by one 8-byte store where it has at most one child (the
    /// link that reached it takes that child). With two, a copy of its
    /// successor (the least key above it) with its children is written
    /// and made durable, then linked in its place; where the successor
    /// lay deeper than its right child, the successor's own node is then
    /// unlinked, so that a crash between the two leaves the successor
    /// twice (equal pairs: searches find the upper one, and
    /// [`pairs`](Self::pairs) lists it once; the recovery unlinks the
    /// lower one, [`undouble`](Self::undouble)), never missing.
    pub fn remove(
        self,
        region: &Region,
        persist: &impl Persist,
        slots: &mut Slots,
        key: &Key<'_>,
    ) -> Result<Remove> {
        self.unlink(region, persist, slots, key, Link::None)
    }

    /// Removes the separator `key` from an internal page whose links on
    /// both sides of it lead to the page `child` (a merge's two pages, the
    /// right one's link pointed at the left), as [`remove`](Self::remove)
    /// does a leaf's key: the node goes with one of the two links (where
    /// the node has one of them as a child, that side goes; else its
    /// successor's left link, the other, goes with the successor).
    pub fn remove_separator(
        self,
        region: &Region,
        persist: &impl Persist,
        slots: &mut Slots,
        key: &Key<'_>,
        child: u64,
    ) -> Result<Remove> {
        self.unlink(region, persist, slots, key, Link::Page(child))
    }

    /// Unlinks `key`'s node and one of the links beside it, both `gone`
    /// (a leaf's none; a merged internal page's child).
    fn unlink(
        self,
        region: &Region,
        persist: &impl Persist,
        slots: &mut Slots,
        key: &Key<'_>,
        gone: Link,
    ) -> Result<Remove> {
        let internal = gone != Link::None;
        let (link_at, Some(node)) = self.descend(region, key, internal)? else {
            return Ok(Remove::Absent);
        };
        let gone = gone.encode();
        let at = self.node_at(node);
        let value = self.word(region, at + VALUE);
        let (left, right) = (self.word(region, at + LEFT), self.word(region, at + RIGHT));
        if left == gone || right == gone {
            persist.persist_word(region, link_at, if left == gone { right } else { left });
            slots.release(node);
            return Ok(Remove::Removed(value));
        }
        if slots.full(Page::capacity(self.bytes)) {
            return Ok(Remove::Full);
        }
        let (successor_link, successor) = self.successor(region, at, internal)?;
        let successor_at = self.node_at(successor);
        let successor_right = self.word(region, successor_at + RIGHT);
        if internal && self.word(region, successor_at + LEFT) != gone {
            return Err(self.corrupt(
                region,
                successor_at,
                format!("the links beside separator {key:?} lead to different pages"),
            ));
        }
        let copy_right = if successor_link == at + RIGHT {
            successor_right
        } else {
            right
        };
        let copy = [
            self.word(region, successor_at + KEY),
            self.word(region, successor_at + VALUE),
            left,
            copy_right,
        ];
        let appended = self.append(region, persist, slots, link_at, copy);
        assert!(appended, "a free slot was checked for");
        if successor_link != at + RIGHT {
            persist.persist_word(region, successor_link, successor_right);
        }
        // (Neither the node nor its successor's is reached any more: the
        // copy took the one's place and skips the other.)
        slots.release(node);
        slots.release(successor);
        Ok(Remove::Removed(value))
    }

    /// The successor of the node at `at` (whose right link is a node): the
    /// leftmost node of its right subtree, and the link that reaches it.
    fn successor(self, region: &Region, at: u64, internal: bool) -> Result<(u64, u32)> {
        let mut successor_link = at + RIGHT;
        let mut successor = self
            .node(
                region,
                Link::decode(self.word(region, at + RIGHT)),
                at + RIGHT,
                internal,
            )?
            .ok_or_else(|| self.corrupt(region, at + RIGHT, "a removal's right link is no node".into()))?;
        for _ in 0..Page::capacity(self.bytes) {
            let below = self.node_at(successor) + LEFT;
            match self.node(region, Link::decode(self.word(region, below)), below, internal)? {
                Some(next) => (successor_link, successor) = (below, next),
                None => return Ok((successor_link, successor)),
            }
        }
        Err(self.cycle(region))
    }

    /// Where a removal was cut short between its successor's copy and the
    /// unlinking of the successor (a key twice, as equal pairs, the copy
    /// above), unlinks the lower one, as the removal would have: the
    /// recovery's, before any write can change one copy and not the other
    /// (a new value, a record freed). Returns whether there was one.
    pub fn undouble(self, region: &Region, persist: &impl Persist) -> Result<bool> {
        let mut previous = None;
        let mut lower = None;
        self.walk(region, &Key::number(0).below(), true, |pair, at, link_at| {
            if previous == Some(pair) {
                // (The successor: the leftmost node of the copy's right
                // subtree, with no left node of its own.)
                lower = Some((at, link_at));
                return Ok(false);
            }
            previous = Some(pair);
            Ok(true)
        })?;
        let Some((at, link_at)) = lower else {
            return Ok(false);
        };
        persist.persist_word(region, link_at, self.word(region, at + RIGHT));
        Ok(true)
    }

    /// The pairs of the page's BST in key order (a leaf's keys and
    /// values; an internal page's separators and their records).
    pub fn pairs(self, region: &Region) -> Result<Vec<(u64, u64)>> {
        let mut pairs = Vec::new();
        self.read_from(region, &Key::number(0).below(), true, usize::MAX, &mut pairs)?;
        Ok(pairs)
    }

    /// Appends to `out` the pairs of the page's BST with keys from `bound`
    /// up in key order (`forward`), or from `bound` down in reverse order,
    /// each key once, at most `max` of them (a scan's read of a leaf).
    pub fn read_from(
        self,
        region: &Region,
        bound: &Key<'_>,
        forward: bool,
        max: usize,
        out: &mut Vec<(u64, u64)>,
    ) -> Result<()> {
        if max == 0 {
            return Ok(());
        }
        let start = out.len();
        let mut last = None;
        self.walk(region, bound, forward, |pair, _, _| {
            // (A pair twice in a row: a removal's successor copied and its
            // original not yet unlinked when a crash came.)
            if last != Some(pair) {
                out.push(pair);
                last = Some(pair);
            }
            Ok(out.len() - start < max)
        })
    }

    /// The node the link word `link` of the page's `words` leads to, if
    /// any (a leaf's links end in none, an internal page's in child
    /// pages), counting the nodes reached in `steps`: a walk that reaches
    /// more than the page holds is in a cycle.
    #[inline(always)]
    fn follow(
        self,
        region: &Region,
        words: &[AtomicU64],
        link: usize,
        internal: bool,
        steps: &mut usize,
    ) -> Result<Option<usize>> {
        let word = words[link].load(std::sync::atomic::Ordering::Acquire);
        let node = (word >> 1) as usize;
        let capacity = Page::capacity(self.bytes) as usize;
        if word & 1 == 1 && node < capacity {
            *steps += 1;
            if *steps > capacity {
                return Err(self.cycle(region));
            }
            return Ok(Some(node));
        }
        if word & 1 == 0 && (word != 0) == internal {
            return Ok(None);
        }
        let at = self.at + 8 * link as u64;
        self.node(region, Link::decode(word), at, internal).map(|_| None)
    }

    /// Visits the nodes (their (key, value) pair, the node's offset and
    /// the offset of the link that reached it) with keys from `bound` up
    /// in key order (`forward`), or down in reverse order, while `visit`
    /// returns true. An in-order walk that compares keys with `bound` only
    /// on its way down to the first node: every later node lies beyond one
    /// already taken. (A scan's inner loop: a few loads per node, over the
    /// page as words with one bounds check; node `i`'s fields are the
    /// words `first + 4 i` on.)
    #[inline(always)]
    fn walk(
        self,
        region: &Region,
        bound: &Key<'_>,
        forward: bool,
        mut visit: impl FnMut((u64, u64), u64, u64) -> Result<bool>,
    ) -> Result<()> {
        let words = region.words(self.at, self.bytes / 8);
        let load = |word: usize| words[word].load(std::sync::atomic::Ordering::Acquire);
        let first = (HEADER / 8) as usize;
        let field = |field: u64| (field / 8) as usize;
        let offset = |word: usize| self.at + 8 * word as u64;
        // Forward: the left subtree first, then the node, then the right.
        let (near, far) = if forward {
            (field(LEFT), field(RIGHT))
        } else {
            (field(RIGHT), field(LEFT))
        };
        let internal = self.level(region)? > 0;
        let mut steps = 0;
        let mut follow = |link: usize| self.follow(region, words, link, internal, &mut steps);
        // The nodes taken whose near subtree is being read (first words),
        // with the links that reached them.
        let mut stack = Vec::with_capacity(32);
        let mut link = field(ROOT);
        while let Some(node) = follow(link)? {
            let at = first + 4 * node;
            let take = match bound.order_with(region, load(at + field(KEY)), || load(at + field(VALUE)))? {
                Ordering::Equal => true,
                Ordering::Less => forward,
                Ordering::Greater => !forward,
            };
            link = at
                + if take {
                    stack.push((at, link));
                    near
                } else {
                    far
                };
        }
        while let Some((at, reached)) = stack.pop() {
            let pair = (load(at + field(KEY)), load(at + field(VALUE)));
            if !visit(pair, offset(at), offset(reached))? {
                return Ok(());
            }
            link = at + far;
            while let Some(node) = follow(link)? {
                stack.push((first + 4 * node, link));
                link = first + 4 * node + near;
            }
        }
        Ok(())
    }

    /// Asks memory for every line of the page at once (a scan reads most
    /// of a leaf, in an order memory cannot guess).
    pub fn prefetch_all(self, region: &Region) {
        for line in 0..self.bytes / LINE {
            region.prefetch(self.at + LINE * line);
        }
    }

    /// The keys of [`pairs`](Self::pairs): a leaf's, or an internal
    /// page's separators.
    pub fn keys(self, region: &Region) -> Result<Vec<Stored>> {
        Ok(self.pairs(region)?.into_iter().map(Stored::at).collect())
    }

    /// The page's slots as the media says: `next` past the highest node
    /// the root reaches, and free every slot below it that no link
    /// reaches. Also the BST's depth (its longest path of nodes).
    pub fn slots(self, region: &Region) -> Result<(Slots, u32)> {
        let internal = self.level(region)? > 0;
        let capacity = Page::capacity(self.bytes);
        let mut reached = vec![false; capacity as usize];
        let mut depth = 0;
        let mut stack = vec![(Link::decode(self.word(region, self.at + ROOT)), self.at + ROOT, 1)];
        let mut visited = 0;
        while let Some((link, from, level)) = stack.pop() {
            let Some(node) = self.node(region, link, from, internal)? else {
                continue;
            };
            visited += 1;
            if visited > capacity || reached[node as usize] {
                return Err(self.corrupt(
                    region,
                    self.at,
                    "a node reached twice, or more than it holds".into(),
                ));
            }
            reached[node as usize] = true;
            depth = depth.max(level);
            let at = self.node_at(node);
            stack.push((Link::decode(self.word(region, at + LEFT)), at + LEFT, level + 1));
            stack.push((Link::decode(self.word(region, at + RIGHT)), at + RIGHT, level + 1));
        }
        let next = reached
            .iter()
            .rposition(|&reached| reached)
            .map_or(0, |node| node as u32 + 1);
        let free = (0..next).filter(|&node| !reached[node as usize]).collect();
        Ok((Slots { next, free }, depth))
    }

    /// Nodes the root reaches (the slots in use).
    pub fn count(self, region: &Region) -> Result<u32> {
        Ok(self.slots(region)?.0.used())
    }

    /// Drops from the BST every node whose key is `bound` or above (the
    /// keys a split moved to the right sibling, after the page's high key
    /// became `bound`): along the path to `bound`, each link to such a node
    /// is pointed at its left subtree instead. Each store keeps every key
    /// below `bound` reachable, whichever of them a crash lets persist, so
    /// they are flushed together and fenced once. Returns whether any
    /// node was dropped.
    pub fn prune(self, region: &Region, persist: &impl Persist, bound: &Key<'_>) -> Result<bool> {
        let internal = self.level(region)? > 0;
        let mut link_at = self.at + ROOT;
        let mut lines: Vec<u64> = Vec::new();
        for _ in 0..=2 * Page::capacity(self.bytes) {
            let Some(node) = self.node(
                region,
                Link::decode(self.word(region, link_at)),
                link_at,
                internal,
            )?
            else {
                for &line in &lines {
                    persist.flush(region, line, LINE);
                }
                if !lines.is_empty() {
                    persist.fence();
                }
                return Ok(!lines.is_empty());
            };
            let at = self.node_at(node);
            if self.order(region, bound, at)? != Ordering::Greater {
                persist.store(region, link_at, self.word(region, at + LEFT));
                let line = link_at & !(LINE - 1);
                if !lines.contains(&line) {
                    lines.push(line);
                }
            } else {
                link_at = at + RIGHT;
            }
        }
        Err(self.cycle(region))
    }

    /// Links the page to a new right sibling `right` holding the keys from
    /// `separator` up: the commit of a split. Sibling and high key share the
    /// header line, which persists them in the order stored: with a
    /// sibling already, the sibling first (until the high key changes, the
    /// keys from the separator up are still found in the page, and the
    /// others move right twice); without one, the high key first (unread
    /// while there is no sibling). Flushed and fenced.
    ///
    /// A bytes key's high key is two words (its word and its record): a
    /// crash can keep one new and one old, which orders keys as a high key
    /// between the two would (keys whose word ties the word kept compare
    /// with the other key's record, which lies beyond all of them or below
    /// all of them). Any such bound is right until the recovery sets it:
    /// the keys between the two are in both pages.
    pub fn link_right(
        self,
        region: &Region,
        persist: &impl Persist,
        header: &Header,
        right: u64,
        separator: Stored,
    ) {
        if header.sibling != 0 {
            persist.store(region, self.at + SIBLING, right);
            self.store_high(region, persist, separator);
        } else {
            self.store_high(region, persist, separator);
            persist.store(region, self.at + SIBLING, right);
        }
        persist.flush(region, self.at, LINE);
        persist.fence();
    }

    /// Stores the high key's two words (not flushed).
    fn store_high(self, region: &Region, persist: &impl Persist, high: Stored) {
        persist.store(region, self.at + HIGH, high.word);
        persist.store(region, self.at + HIGH_RECORD, high.record);
    }

    /// Hangs the complete BST of `pairs` at the right end of the page's
    /// BST: a merge's first step. Its keys lie above the page's and from
    /// its high key up, unread until the page takes over its sibling's
    /// range (see [`absorb`](Self::absorb)). The nodes are written in free
    /// slots and made durable, then linked by one 8-byte store at the
    /// BST's rightmost end: a leaf's empty link, or an internal page's
    /// link to its last child, which must be the first of `children`
    /// (the new nodes' links to pages, left to right: one more than
    /// `pairs`). Returns false, writing nothing, when the page has too few
    /// free slots.
    pub fn graft(
        self,
        region: &Region,
        persist: &impl Persist,
        slots: &mut Slots,
        pairs: &[(u64, u64)],
        children: Option<&[u64]>,
    ) -> Result<bool> {
        let internal = children.is_some();
        let capacity = Page::capacity(self.bytes);
        let mut link_at = self.at + ROOT;
        for _ in 0..=capacity {
            match self.node(
                region,
                Link::decode(self.word(region, link_at)),
                link_at,
                internal,
            )? {
                Some(node) => link_at = self.node_at(node) + RIGHT,
                None => break,
            }
        }
        let end = Link::decode(self.word(region, link_at));
        if let Some(children) = children {
            if end != Link::Page(children[0]) {
                return Err(self.corrupt(
                    region,
                    link_at,
                    format!("its last child is {end:?}, not page {}", children[0]),
                ));
            }
        } else if end != Link::None {
            return Err(self.cycle(region));
        }
        if (capacity - slots.used()) < pairs.len() as u32 {
            return Ok(false);
        }
        let mut nodes = vec![[0u64; 4]; pairs.len()];
        let mut child = 0;
        let root = place(&mut nodes, pairs, &mut || match children {
            Some(children) => {
                child += 1;
                Link::Page(children[child - 1])
            }
            None => Link::None,
        });
        let Link::Node(_) = root else {
            return Ok(true);
        };
        let taken: Vec<u32> = (0..nodes.len())
            .map(|_| slots.take(capacity, None).expect("free slots were counted"))
            .collect();
        let moved = |word: u64| match Link::decode(word) {
            Link::Node(i) => Link::Node(taken[i as usize]).encode(),
            _ => word,
        };
        let mut lines = Vec::with_capacity(nodes.len());
        for (node, &slot) in nodes.iter().zip(&taken) {
            let at = self.node_at(slot);
            let words = [node[0], node[1], moved(node[2]), moved(node[3])];
            for (field, word) in [KEY, VALUE, LEFT, RIGHT].into_iter().zip(words) {
                persist.store(region, at + field, word);
            }
            lines.push(at & !(LINE - 1));
        }
        lines.sort_unstable();
        lines.dedup();
        for &line in &lines {
            persist.flush(region, line, LINE);
        }
        persist.fence();
        persist.persist_word(region, link_at, moved(root.encode()));
        Ok(true)
    }

    /// Takes over the range of its right sibling, whose keys it now holds
    /// (grafted): its high key and sibling become the sibling's (`high`,
    /// `sibling`). The commit of a merge. Both are in the header line,
    /// which persists them in the order stored: while a sibling stays, the
    /// high key first (the keys up to the new high key are then found in
    /// the page; those above still move right, through the old sibling);
    /// where the old sibling ended its level, the sibling link cleared
    /// first (the page then holds every key above its low key). Flushed
    /// and fenced.
    /// (A bytes key's high key half changed orders keys as one between
    /// the two would: see [`link_right`](Self::link_right).)
    pub fn absorb(self, region: &Region, persist: &impl Persist, high: Stored, sibling: u64) {
        if sibling != 0 {
            self.store_high(region, persist, high);
            persist.store(region, self.at + SIBLING, sibling);
        } else {
            persist.store(region, self.at + SIBLING, 0);
            self.store_high(region, persist, Stored::NONE);
        }
        persist.flush(region, self.at, LINE);
        persist.fence();
    }

    /// Sets the high key alone (a split's commit cut short after its
    /// sibling link: recovery), flushed and fenced.
    pub fn set_high(self, region: &Region, persist: &impl Persist, high: Stored) {
        self.store_high(region, persist, high);
        persist.flush(region, self.at, LINE);
        persist.fence();
    }

    /// Writes a page at `at` (a block no reader reaches yet) holding the
    /// leaf `pairs` (sorted, distinct keys) as a complete BST, its lines
    /// written whole and flushed; the caller fences before it publishes
    /// the page. Returns the count of nodes written.
    pub fn build_leaf(
        region: &Region,
        persist: &impl Persist,
        page: Page,
        header: Header,
        pairs: &[(u64, u64)],
    ) -> u32 {
        assert_eq!(header.level, 0, "a leaf is level 0");
        let mut nodes = vec![[0u64; 4]; pairs.len()];
        let root = place(&mut nodes, pairs, &mut || Link::None);
        page.write(region, persist, header, root, &nodes)
    }

    /// As [`build_leaf`](Self::build_leaf), an internal page: `separators`
    /// (sorted, distinct) between `children` (one more): child `i` holds
    /// the keys from separator `i - 1` up to separator `i`.
    pub fn build_internal(
        region: &Region,
        persist: &impl Persist,
        page: Page,
        header: Header,
        separators: &[Stored],
        children: &[u64],
    ) -> u32 {
        assert!(header.level > 0, "an internal page is above level 0");
        assert_eq!(
            children.len(),
            separators.len() + 1,
            "a child more than separators"
        );
        let pairs: Vec<(u64, u64)> = separators.iter().map(|key| (key.word, key.record)).collect();
        let mut nodes = vec![[0u64; 4]; pairs.len()];
        // The fringe links, left to right, are the children in order.
        let mut child = 0;
        let root = place(&mut nodes, &pairs, &mut || {
            child += 1;
            Link::Page(children[child - 1])
        });
        page.write(region, persist, header, root, &nodes)
    }

    /// Writes the header and `nodes` ([key, value, left, right] words)
    /// whole lines at a time, flushed.
    fn write(
        self,
        region: &Region,
        persist: &impl Persist,
        header: Header,
        root: Link,
        nodes: &[[u64; 4]],
    ) -> u32 {
        assert!(
            nodes.len() <= Page::capacity(self.bytes) as usize,
            "more nodes than the page holds"
        );
        let mut lines = Vec::with_capacity(1 + nodes.len().div_ceil(2));
        let mut first = [0u8; LINE as usize];
        for (field, word) in [
            (META, TAG | u64::from(header.level)),
            (ROOT, root.encode()),
            (SIBLING, header.sibling),
            (HIGH, header.high.word),
            (LOW, header.low.word),
            (HIGH_RECORD, header.high.record),
            (LOW_RECORD, header.low.record),
        ] {
            first[field as usize..field as usize + 8].copy_from_slice(&word.to_le_bytes());
        }
        lines.push((0, first));
        for (i, pair) in nodes.chunks(2).enumerate() {
            let mut line = [0u8; LINE as usize];
            for (n, node) in pair.iter().enumerate() {
                for (w, word) in node.iter().enumerate() {
                    let at = n * NODE as usize + 8 * w;
                    line[at..at + 8].copy_from_slice(&word.to_le_bytes());
                }
            }
            lines.push((HEADER + LINE * i as u64, line));
        }
        persist.write_lines(region, self.at, &lines);
        nodes.len() as u32
    }
}

/// Places `pairs` as a complete BST into `nodes` in breadth-first order
/// (node `k`'s children are `2k + 1` and `2k + 2`: the top levels lie in
/// the page's first lines, which a search asks of memory together, see
/// [`Page::prefetch`]), each empty subtree's link given by `fringe` in key
/// order; returns the link to its root.
fn place(nodes: &mut [[u64; 4]], pairs: &[(u64, u64)], fringe: &mut impl FnMut() -> Link) -> Link {
    // An in-order walk of the implicit tree hands out the pairs in order.
    fn walk(
        nodes: &mut [[u64; 4]],
        node: usize,
        pairs: &mut std::slice::Iter<'_, (u64, u64)>,
        fringe: &mut impl FnMut() -> Link,
    ) -> Link {
        if node >= nodes.len() {
            return fringe();
        }
        let left = walk(nodes, 2 * node + 1, pairs, fringe);
        let &(key, value) = pairs.next().expect("a pair per node");
        let right = walk(nodes, 2 * node + 2, pairs, fringe);
        nodes[node] = [key, value, left.encode(), right.encode()];
        Link::Node(node as u32)
    }
    walk(nodes, 0, &mut pairs.iter(), fringe)
}
