//! Splits (seed 001 §3.2.2, §3.3): a full leaf becomes two, and a node
//! with too many children gives half of them to a new sibling.
//!
//! - **Slow split**: the leaf's lists are interleaved, collapsed (tombstones
//!   dropped: nothing lies below a leaf) and written as one new list; if
//!   that list is more than half a node, it is cut at its median block
//!   between the leaf and a new leaf, both referring to the one file.
//!   Otherwise the leaf keeps it alone (collapsing freed the room). About
//!   2B of I/O for a leaf of B bytes. On several threads the leaf's two
//!   halves are interleaved at once, into a list each (cut at the largest
//!   list's median, as a fast split cuts).
//! - **Fast split**: no data moves. The median hash of the leaf's largest
//!   list (read from its first-hash index) cuts every list; the new leaf
//!   refers to the upper parts of the old files. Stale versions stay until
//!   the lineage's next slow split.
//! - **Divide**: a node with more than `fan_out` children keeps the lower
//!   half; a new sibling takes the upper half, and the node's lists are
//!   cut between them by hash range, as a fast split cuts them. The root
//!   instead grows a level: two new nodes take its halves.

use std::sync::Arc;

use spillway_core::{Hash64, Result};

use crate::list::{ListFile, ListRef};
use crate::spill::{in_parts, kept_at_leaf, seqs_of, Job};
use crate::tree::{Child, Edit, Node, NodeId, Tree, ROOT};

/// `node` given the hashes `low..=high` and the parts of its lists that
/// fall in them.
fn narrowed(node: &Node, id: NodeId, low: Hash64, high: Hash64) -> Node {
    Node {
        id,
        low,
        high,
        children: Vec::new(),
        lists: node
            .lists
            .iter()
            .filter_map(|list| list.narrow(low, high))
            .collect(),
        fast_splits: node.fast_splits,
    }
}

/// The edit that puts `left` (keeping `id`) and `right`, its new sibling,
/// in the place of node `id`.
fn in_two(tree: &Tree, id: NodeId, left: Node, right: Node) -> Edit {
    let sibling = Child {
        low: right.low,
        id: right.id,
    };
    let parent = parent_with_sibling(tree, id, sibling);
    Edit {
        nodes: vec![left, right, parent],
        removed: Vec::new(),
    }
}

/// The parent of `id` with `sibling` inserted after it.
fn parent_with_sibling(tree: &Tree, id: NodeId, sibling: Child) -> Node {
    let (parent, index) = tree.parent_of(id).expect("a non-root node has a parent");
    let mut parent = (**parent).clone();
    parent.children.insert(index + 1, sibling);
    parent
}

/// Splits leaf `id` in two at `separator` (the new leaf, `new_id`, owns
/// `separator..`), cutting its lists.
fn cut_leaf(tree: &Tree, id: NodeId, new_id: NodeId, separator: Hash64, fast_splits: u32) -> Edit {
    let node = tree.node(id);
    let mut left = narrowed(node, id, node.low, separator - 1);
    let mut right = narrowed(node, new_id, separator, node.high);
    left.fast_splits = fast_splits;
    right.fast_splits = fast_splits;
    in_two(tree, id, left, right)
}

/// The outcome of a slow split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlowSplit {
    /// The leaf became two.
    Split,
    /// The collapsed lists fit in half a node: the leaf keeps one list.
    Collapsed,
}

/// Slow-splits leaf `id`; the new leaf, if any, is numbered `new_id`.
/// On more than one of [`Job::threads`] the leaf's two halves (cut at its largest list's
/// median, as a fast split cuts) are interleaved at once, each into a list of
/// its own: a leaf that stays whole keeps two lists of disjoint hash
/// ranges (a GET tests only the one whose range holds its hash).
pub fn slow_split(job: &mut Job<'_>, tree: &Tree, id: NodeId, new_id: NodeId) -> Result<(Edit, SlowSplit)> {
    let node = tree.node(id);
    debug_assert!(node.is_leaf());
    let halves = (job.threads() > 1)
        .then(|| node.lists.iter().max_by_key(|list| list.bytes())?.median_hash())
        .flatten()
        .filter(|&hash| hash > node.low);
    let parts = match halves {
        Some(separator) => vec![
            narrowed(node, id, node.low, separator - 1),
            narrowed(node, id, separator, node.high),
        ],
        None => vec![(**node).clone()],
    };
    let lists: Vec<ListRef> = in_parts(job, &parts, rewrite)?
        .into_iter()
        .flatten()
        .map(ListRef::whole)
        .collect();
    let mut kept = (**node).clone();
    kept.fast_splits = 0;
    let bytes: u64 = lists.iter().map(ListRef::bytes).sum();
    let separator = halves.or_else(|| lists.first()?.median_hash().filter(|&hash| hash > node.low));
    kept.lists = lists;
    let edit = Edit {
        nodes: vec![kept],
        removed: Vec::new(),
    };
    match separator {
        Some(separator) if bytes > job.options.node_bytes / 2 => {
            let staged = tree.apply(&edit);
            Ok((cut_leaf(&staged, id, new_id, separator, 0), SlowSplit::Split))
        }
        // Collapsing freed the room, or everything was deleted.
        _ => Ok((edit, SlowSplit::Collapsed)),
    }
}

/// Interleaves the lists of leaf `node` into one new list, tombstones dropped;
/// `None` if nothing is left.
fn rewrite(job: &mut Job<'_>, node: &Node) -> Result<Option<Arc<ListFile>>> {
    let mut interleaver = job.interleave_lists(node)?;
    let mut writer = None;
    let seqs = seqs_of(&node.lists);
    while let Some(record) = interleaver.next_record()? {
        if kept_at_leaf(&record) {
            if writer.is_none() {
                writer = Some(job.list_writer((node.low, node.high), seqs)?);
            }
            writer.as_mut().expect("a writer is open").add(&record)?;
        }
    }
    job.records_in += interleaver.records_in();
    writer.map(|writer| job.finish(writer)).transpose()
}

/// Fast-splits leaf `id` at the median hash of its largest list; `None`
/// when no list can be cut (a list of one block), and the caller splits
/// slowly instead.
pub fn fast_split(tree: &Tree, id: NodeId, new_id: NodeId) -> Option<Edit> {
    let node = tree.node(id);
    debug_assert!(node.is_leaf());
    let largest = node.lists.iter().max_by_key(|list| list.bytes())?;
    let separator = largest.median_hash().filter(|&hash| hash > node.low)?;
    Some(cut_leaf(tree, id, new_id, separator, node.fast_splits + 1))
}

/// Gives the upper half of the children of node `id` (not the root) to a
/// new sibling `new_id`.
pub fn divide(tree: &Tree, id: NodeId, new_id: NodeId) -> Edit {
    debug_assert_ne!(id, ROOT);
    let node = tree.node(id);
    let half = node.children.len() / 2;
    let separator = node.children[half].low;
    let mut left = narrowed(node, id, node.low, separator - 1);
    left.children = node.children[..half].to_vec();
    let mut right = narrowed(node, new_id, separator, node.high);
    right.children = node.children[half..].to_vec();
    in_two(tree, id, left, right)
}

/// Grows the tree a level: the root's children go to two new nodes,
/// `left_id` and `right_id`, which become its only children.
pub fn grow(tree: &Tree, left_id: NodeId, right_id: NodeId) -> Edit {
    let root = tree.root();
    let half = root.children.len() / 2;
    let separator = root.children[half].low;
    let mut left = Node::new(left_id, root.low, separator - 1);
    left.children = root.children[..half].to_vec();
    let mut right = Node::new(right_id, separator, root.high);
    right.children = root.children[half..].to_vec();
    let mut new_root = (**root).clone();
    new_root.children = vec![
        Child {
            low: root.low,
            id: left_id,
        },
        Child {
            low: separator,
            id: right_id,
        },
    ];
    Edit {
        nodes: vec![new_root, left, right],
        removed: Vec::new(),
    }
}
