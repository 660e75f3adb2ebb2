//! The tree: nodes that own slices of the hash space, their lists, and the
//! edits that spills and splits make to it.
//!
//! A [`Tree`] is one version, immutable once built: readers hold it
//! through an `Arc` while the background worker builds the next one with
//! [`Tree::apply`] (nodes it does not change are shared by both).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use spillway_core::{Error, Hash64, Result};

use crate::kmv::UnionEstimate;
use crate::list::{FileNumber, ListFile, ListRef};

/// A node's number; the root is [`ROOT`].
pub type NodeId = u64;

/// The root's number. The root's buffer lives in memory; as a node it has
/// children and never lists.
pub const ROOT: NodeId = 0;

/// A child as its parent routes to it: its lowest hash and its number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Child {
    /// The lowest hash the child owns (it owns up to the next child's low).
    pub low: Hash64,
    /// The child's number.
    pub id: NodeId,
}

/// A node: a slice of the hash space, the lists spilled into it (oldest
/// first), and its children (none for a leaf).
#[derive(Debug, Clone)]
pub struct Node {
    /// Its number.
    pub id: NodeId,
    /// The lowest hash it owns.
    pub low: Hash64,
    /// The highest hash it owns.
    pub high: Hash64,
    /// Its children in hash order; empty for a leaf.
    pub children: Vec<Child>,
    /// Its lists, oldest first.
    pub lists: Vec<ListRef>,
    /// Fast splits since its lineage last split slowly (leaves only).
    pub fast_splits: u32,
}

impl Node {
    /// A node with no lists and no children.
    pub fn new(id: NodeId, low: Hash64, high: Hash64) -> Node {
        Node {
            id,
            low,
            high,
            children: Vec::new(),
            lists: Vec::new(),
            fast_splits: 0,
        }
    }

    /// Whether it is a leaf (the root never is).
    pub fn is_leaf(&self) -> bool {
        self.id != ROOT && self.children.is_empty()
    }

    /// Bytes of its lists: what counts against its capacity.
    pub fn bytes(&self) -> u64 {
        self.lists.iter().map(ListRef::bytes).sum()
    }

    /// Records in its lists (estimated for lists that share a file).
    pub fn records(&self) -> u64 {
        self.lists.iter().map(ListRef::records).sum()
    }

    /// What a GET of an absent key meets in this node at worst: the most
    /// lists whose hash range holds one hash, and the most block reads
    /// their filters' false positives cost. A GET tests only the lists
    /// whose range holds its hash, and a slow split's halves or a fast
    /// split's parts cover ranges apart, so lists are counted where they
    /// overlap, not summed. Lists without a filter (written with no bits,
    /// answering "maybe" to every key) count as lists, not as reads.
    pub fn lists_met(&self) -> (usize, f64) {
        // Each list starts at its low hash and ends past its high one;
        // at one hash, starts come first (ranges hold both ends).
        let mut bounds: Vec<(Hash64, bool, f64)> = Vec::with_capacity(2 * self.lists.len());
        for list in &self.lists {
            let rate = list.file.false_positive_rate();
            let reads = if rate < 1.0 { rate } else { 0.0 };
            bounds.push((list.low, false, reads));
            bounds.push((list.high, true, reads));
        }
        bounds.sort_unstable_by_key(|&(hash, end, _)| (hash, end));
        let (mut lists, mut reads, mut most) = (0usize, 0.0f64, (0usize, 0.0f64));
        for (_, end, rate) in bounds {
            if end {
                lists -= 1;
                reads -= rate;
            } else {
                lists += 1;
                reads += rate;
                most = (most.0.max(lists), most.1.max(reads));
            }
        }
        most
    }

    /// The estimated share of its records that are distinct keys (1 when
    /// no key repeats across its lists; seed 001 §6's α).
    pub fn unique_ratio(&self) -> f64 {
        let records = self.records();
        if records == 0 || self.lists.len() < 2 {
            return 1.0;
        }
        let mut union = UnionEstimate::new();
        for list in &self.lists {
            union.add(list.file.sketch(), list.low, list.high);
        }
        (union.estimate() / records as f64).min(1.0)
    }

    /// The index of the child that owns `hash`.
    #[inline]
    pub fn child_index(&self, hash: Hash64) -> usize {
        debug_assert!(!self.children.is_empty());
        self.children
            .partition_point(|child| child.low <= hash)
            .saturating_sub(1)
    }

    /// The highest hash child `index` owns.
    pub fn child_high(&self, index: usize) -> Hash64 {
        self.children
            .get(index + 1)
            .map_or(self.high, |next| next.low - 1)
    }
}

/// One version of the tree.
#[derive(Debug, Clone)]
pub struct Tree {
    nodes: HashMap<NodeId, Arc<Node>>,
}

/// What a spill or split changes: nodes written whole (new or changed),
/// and nodes gone.
#[derive(Debug, Clone, Default)]
pub struct Edit {
    /// New or changed nodes.
    pub nodes: Vec<Node>,
    /// Removed nodes.
    pub removed: Vec<NodeId>,
}

impl Tree {
    /// The tree of an empty store: the root over one empty leaf that owns
    /// every hash.
    pub fn empty() -> Tree {
        let mut root = Node::new(ROOT, 0, u64::MAX);
        root.children.push(Child { low: 0, id: 1 });
        let leaf = Node::new(1, 0, u64::MAX);
        Tree::from_nodes([root, leaf])
    }

    /// A tree of these nodes (checked by [`check_invariants`](Self::check_invariants)).
    pub fn from_nodes(nodes: impl IntoIterator<Item = Node>) -> Tree {
        Tree {
            nodes: nodes.into_iter().map(|node| (node.id, Arc::new(node))).collect(),
        }
    }

    /// The node numbered `id`.
    ///
    /// # Panics
    /// If there is none: ids come from the tree itself.
    pub fn node(&self, id: NodeId) -> &Arc<Node> {
        &self.nodes[&id]
    }

    /// The root.
    pub fn root(&self) -> &Arc<Node> {
        self.node(ROOT)
    }

    /// Every node, in no particular order.
    pub fn nodes(&self) -> impl Iterator<Item = &Arc<Node>> {
        self.nodes.values()
    }

    /// Nodes in the tree.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// The nodes below the root on the path to the leaf that owns `hash`,
    /// top down, passed to `visit` until it returns `false`.
    #[inline]
    pub fn walk(&self, hash: Hash64, mut visit: impl FnMut(&Node) -> Result<bool>) -> Result<()> {
        let mut node = self.root();
        while !node.children.is_empty() {
            node = self.node(node.children[node.child_index(hash)].id);
            if !visit(node)? {
                break;
            }
        }
        Ok(())
    }

    /// The parent of node `id` (not the root) and its index there.
    pub fn parent_of(&self, id: NodeId) -> Option<(&Arc<Node>, usize)> {
        let node = self.nodes.get(&id)?;
        let mut parent = self.root();
        loop {
            let index = parent.child_index(node.low);
            let child = parent.children[index].id;
            if child == id {
                return Some((parent, index));
            }
            parent = self.node(child);
            if parent.children.is_empty() {
                return None;
            }
        }
    }

    /// Leaves in hash order.
    pub fn leaves(&self) -> Vec<NodeId> {
        let mut leaves = Vec::new();
        let mut stack = vec![ROOT];
        while let Some(id) = stack.pop() {
            let node = self.node(id);
            if node.is_leaf() {
                leaves.push(id);
            }
            stack.extend(node.children.iter().rev().map(|child| child.id));
        }
        leaves
    }

    /// Levels below the root (1 for a root over leaves).
    pub fn height(&self) -> usize {
        let mut height = 0;
        let mut node = self.root();
        while let Some(child) = node.children.first() {
            node = self.node(child.id);
            height += 1;
        }
        height
    }

    /// The files the tree's lists refer to.
    pub fn files(&self) -> HashMap<FileNumber, Arc<ListFile>> {
        let mut files = HashMap::new();
        for node in self.nodes.values() {
            for list in &node.lists {
                files
                    .entry(list.file.number())
                    .or_insert_with(|| list.file.clone());
            }
        }
        files
    }

    /// The next version: this one with `edit` applied.
    pub fn apply(&self, edit: &Edit) -> Tree {
        let mut nodes = self.nodes.clone();
        for id in &edit.removed {
            nodes.remove(id);
        }
        for node in &edit.nodes {
            nodes.insert(node.id, Arc::new(node.clone()));
        }
        Tree { nodes }
    }

    /// Carries `edit`, computed against `base`, over to `self`: a later
    /// version that differs from `base` only by lists appended to nodes
    /// (the root spills the worker installed while a rewrite computed
    /// `edit`, worker.rs). Each node of the edit keeps its lists and gets,
    /// after them, those appended since `base` to the node it replaces,
    /// or, for a node the edit creates, to `origin` (the node it was cut
    /// from), narrowed to its hashes: they are newer than anything the
    /// edit interleaved, so they stay last.
    ///
    /// # Errors
    /// `Internal` if `self` changed `base` otherwise (a node of the edit
    /// gone, its range or children changed, its old lists not a prefix
    /// of its lists now), or if lists were appended to a node the edit
    /// removes: the worker lets nothing else run beside a rewrite.
    pub fn rebase(&self, base: &Tree, origin: NodeId, edit: Edit) -> Result<Edit> {
        let appended = |id: NodeId| -> Result<&[ListRef]> {
            let broken = |what: &str| Err(Error::Internal(format!("rebasing an edit: node {id} {what}")));
            let (Some(then), Some(now)) = (base.nodes.get(&id), self.nodes.get(&id)) else {
                return broken("is missing");
            };
            if then.low != now.low || then.high != now.high || then.children != now.children {
                return broken("changed its range or children");
            }
            let kept = then.lists.len();
            if now.lists.len() < kept || !then.lists.iter().zip(&now.lists).all(|(a, b)| a.same_run(b)) {
                return broken("lost lists");
            }
            Ok(&now.lists[kept..])
        };
        for &id in &edit.removed {
            if !appended(id)?.is_empty() {
                return Err(Error::Internal(format!(
                    "rebasing an edit: node {id} is removed but got lists"
                )));
            }
        }
        let mut nodes = Vec::with_capacity(edit.nodes.len());
        for mut node in edit.nodes {
            let source = if base.nodes.contains_key(&node.id) {
                node.id
            } else {
                origin
            };
            let (low, high) = (node.low, node.high);
            node.lists
                .extend(appended(source)?.iter().filter_map(|list| list.narrow(low, high)));
            nodes.push(node);
        }
        Ok(Edit {
            nodes,
            removed: edit.removed,
        })
    }

    /// Checks the structure: every node reachable once from the root,
    /// children in order and covering their parent's hashes exactly, lists
    /// within their node's hashes and their files' blocks, leaves on one
    /// level. Cheap enough to run after every change in tests; `verify`
    /// runs it too.
    pub fn check_invariants(&self) -> Result<()> {
        let broken = |what: String| Err(Error::Internal(format!("tree invariant: {what}")));
        let Some(root) = self.nodes.get(&ROOT) else {
            return broken("no root".into());
        };
        if root.low != 0 || root.high != u64::MAX || root.children.is_empty() || !root.lists.is_empty() {
            return broken(format!(
                "root {root:?} must own every hash, have children and no lists"
            ));
        }
        let mut seen = HashSet::new();
        let mut leaf_depth = None;
        let mut stack = vec![(ROOT, 0usize)];
        while let Some((id, depth)) = stack.pop() {
            if !seen.insert(id) {
                return broken(format!("node {id} reached twice"));
            }
            let Some(node) = self.nodes.get(&id) else {
                return broken(format!("node {id} is referenced but missing"));
            };
            for list in &node.lists {
                let blocks = list.file.blocks();
                if list.low < node.low
                    || list.high > node.high
                    || list.low > list.high
                    || list.first_block >= list.end_block
                    || list.end_block > blocks
                {
                    return broken(format!(
                        "node {id} ({:#x}..={:#x}) holds list of file {} blocks {}..{} of {blocks}, hashes {:#x}..={:#x}",
                        node.low,
                        node.high,
                        list.file.number(),
                        list.first_block,
                        list.end_block,
                        list.low,
                        list.high
                    ));
                }
            }
            if node.is_leaf() {
                if *leaf_depth.get_or_insert(depth) != depth {
                    return broken(format!("leaf {id} at depth {depth}, others at {leaf_depth:?}"));
                }
                continue;
            }
            for (index, child) in node.children.iter().enumerate() {
                let Some(node_child) = self.nodes.get(&child.id) else {
                    return broken(format!("child {} of {id} is missing", child.id));
                };
                let expected_low = if index == 0 { node.low } else { child.low };
                let high = node.child_high(index);
                if child.low != expected_low
                    || node_child.low != child.low
                    || node_child.high != high
                    || high < child.low
                {
                    return broken(format!(
                        "child {} of {id} owns {:#x}..={:#x}, its parent routes {:#x}..={high:#x}",
                        child.id, node_child.low, node_child.high, child.low
                    ));
                }
                stack.push((child.id, depth + 1));
            }
        }
        if seen.len() != self.nodes.len() {
            return broken(format!("{} nodes, {} reachable", self.nodes.len(), seen.len()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_tree_routes_every_hash_to_its_one_leaf() {
        let tree = Tree::empty();
        tree.check_invariants().unwrap();
        assert_eq!(tree.height(), 1);
        assert_eq!(tree.leaves(), vec![1]);
        let mut path = Vec::new();
        tree.walk(12345, |node| {
            path.push(node.id);
            Ok(true)
        })
        .unwrap();
        assert_eq!(path, vec![1]);
        assert_eq!(
            tree.parent_of(1).map(|(parent, index)| (parent.id, index)),
            Some((ROOT, 0))
        );
    }

    #[test]
    fn edits_make_a_new_version_and_broken_shapes_are_caught() {
        let tree = Tree::empty();
        let mut root = (**tree.root()).clone();
        root.children.push(Child { low: 1 << 63, id: 2 });
        let mut left = Node::new(1, 0, (1 << 63) - 1);
        left.fast_splits = 1;
        let right = Node::new(2, 1 << 63, u64::MAX);
        let edit = Edit {
            nodes: vec![root, left, right],
            removed: Vec::new(),
        };
        let split = tree.apply(&edit);
        split.check_invariants().unwrap();
        assert_eq!(split.leaves(), vec![1, 2]);
        assert_eq!(
            split
                .node(split.root().children[split.root().child_index(u64::MAX)].id)
                .id,
            2
        );
        assert_eq!(tree.leaves(), vec![1], "the old version is unchanged");

        // A gap between siblings.
        let mut gap = (**split.node(2)).clone();
        gap.low += 1;
        let broken = split.apply(&Edit {
            nodes: vec![gap],
            removed: Vec::new(),
        });
        assert!(broken.check_invariants().is_err());
        // An unreachable node.
        let stray = split.apply(&Edit {
            nodes: vec![Node::new(9, 0, 5)],
            removed: Vec::new(),
        });
        assert!(stray
            .check_invariants()
            .unwrap_err()
            .to_string()
            .contains("reachable"));
    }

    /// Three whole lists of 500 keys each, files 1-3 of a simulated file
    /// system.
    fn three_lists() -> [ListRef; 3] {
        use std::path::Path;

        use spillway_core::{Fs, SimFs};

        use crate::list::tests::write;

        let fs = Arc::new(SimFs::new());
        fs.create_dir_all(Path::new("/l")).unwrap();
        [1, 2, 3].map(|number| ListRef::whole(write(&fs, number, 500, 0).0))
    }

    #[test]
    fn a_get_meets_only_the_lists_whose_range_holds_its_hash() {
        let [all, halved, again] = three_lists();
        let cut = halved.median_hash().unwrap();
        let mut leaf = Node::new(1, 0, u64::MAX);
        assert_eq!(leaf.lists_met(), (0, 0.0));
        // A list over everything, and one list's halves: two at any hash.
        leaf.lists.push(all.clone());
        leaf.lists.push(halved.narrow(0, cut - 1).unwrap());
        leaf.lists.push(halved.narrow(cut, u64::MAX).unwrap());
        let rate = |list: &ListRef| list.file.false_positive_rate();
        let (lists, reads) = leaf.lists_met();
        assert_eq!(lists, 2);
        assert!((reads - rate(&all) - rate(&halved)).abs() < 1e-12, "{reads}");
        // Ranges hold both ends: a list of the cut's hash alone meets the
        // upper half there.
        leaf.lists.push(again.narrow(cut, cut).unwrap());
        assert_eq!(leaf.lists_met().0, 3);
        leaf.lists.pop();
        leaf.lists.push(again.narrow(cut - 1, cut - 1).unwrap());
        assert_eq!(leaf.lists_met().0, 3);
        leaf.lists.pop();
        leaf.lists.push(again.narrow(0, cut - 1).unwrap());
        assert_eq!(leaf.lists_met().0, 3);
    }

    #[test]
    fn a_rebased_edit_keeps_the_lists_appended_since_its_base_narrowed_to_each_node() {
        let [old, interleaved, appended] = three_lists();
        let mut base = Tree::empty();
        let mut leaf = (**base.node(1)).clone();
        leaf.lists.push(old);
        base = base.apply(&Edit {
            nodes: vec![leaf.clone()],
            removed: Vec::new(),
        });
        // A slow split of leaf 1 computed against `base`: its lists interleaved
        // into file 2, cut between leaf 1 and a new leaf 2.
        let cut = interleaved.median_hash().unwrap();
        let mut root = (**base.root()).clone();
        root.children.push(Child { low: cut, id: 2 });
        let mut left = Node::new(1, 0, cut - 1);
        left.lists.push(interleaved.narrow(0, cut - 1).unwrap());
        let mut right = Node::new(2, cut, u64::MAX);
        right.lists.push(interleaved.narrow(cut, u64::MAX).unwrap());
        let split = Edit {
            nodes: vec![root, left, right],
            removed: Vec::new(),
        };
        // Meanwhile a root spill appended file 3 to leaf 1.
        leaf.lists.push(appended.clone());
        let current = base.apply(&Edit {
            nodes: vec![leaf.clone()],
            removed: Vec::new(),
        });

        let next = current.apply(&current.rebase(&base, 1, split.clone()).unwrap());
        next.check_invariants().unwrap();
        assert_eq!(next.leaves(), vec![1, 2]);
        for id in [1, 2] {
            let node = next.node(id);
            let numbers: Vec<_> = node.lists.iter().map(|list| list.file.number()).collect();
            assert_eq!(
                numbers,
                vec![2, 3],
                "node {id}: the interleaved list, then the newer one"
            );
            let narrowed = appended.narrow(node.low, node.high).unwrap();
            assert!(node.lists[1].same_run(&narrowed), "node {id}");
        }
        // Against a version that is not `base` plus appended lists: refused.
        let mut lost = leaf.clone();
        lost.lists.remove(0);
        let changed = base.apply(&Edit {
            nodes: vec![lost],
            removed: Vec::new(),
        });
        let error = changed.rebase(&base, 1, split.clone()).unwrap_err();
        assert!(error.to_string().contains("node 1 lost lists"), "{error}");
        let grown = current.apply(&split);
        let error = grown.rebase(&base, 1, split).unwrap_err();
        assert!(
            error.to_string().contains("changed its range or children"),
            "{error}"
        );
        let removal = Edit {
            nodes: Vec::new(),
            removed: vec![1],
        };
        let error = current.rebase(&base, 1, removal).unwrap_err();
        assert!(error.to_string().contains("removed but got lists"), "{error}");
    }
}
