//! An ordinary in-memory B+ tree with node splits: the first buffer of a
//! stream under the seed's fixed template policy grows one to make the
//! template (see [`crate::template`]), and a
//! tree rebuilt for every buffer is the baseline the template is measured
//! against.
//!
//! Duplicate keys are allowed. An insert goes right of separators equal to
//! its key, and a split can leave equal keys on both sides of the new
//! separator, so reads descend to the leftmost leaf that may hold a key
//! (separators strictly below it) and walk right along the leaf chain.

use crate::entry::{Entry, Indexed};

/// A node: internal (separators and children) or a leaf (sorted entries
/// and the next leaf).
#[derive(Debug)]
pub(crate) enum Node<E = Entry> {
    /// `children[i]` holds keys from `separators[i - 1]` to
    /// `separators[i]`.
    Internal {
        separators: Vec<u64>,
        children: Vec<usize>,
    },
    Leaf {
        entries: Vec<E>,
        next: Option<usize>,
    },
}

/// A B+ tree of entries ([`Entry`]s unless said otherwise) ordered by
/// key, with splits.
#[derive(Debug)]
pub struct BPlusTree<E = Entry> {
    pub(crate) nodes: Vec<Node<E>>,
    pub(crate) root: usize,
    fan_out: usize,
    leaf_capacity: usize,
    len: usize,
    splits: u64,
}

impl<E: Indexed> BPlusTree<E> {
    /// An empty tree whose internal nodes have up to `fan_out` children
    /// and whose leaves hold up to `leaf_capacity` entries.
    pub fn new(fan_out: usize, leaf_capacity: usize) -> Self {
        assert!(fan_out >= 3 && leaf_capacity >= 2, "checked by the options");
        BPlusTree {
            nodes: vec![Node::Leaf {
                entries: Vec::with_capacity(leaf_capacity + 1),
                next: None,
            }],
            root: 0,
            fan_out,
            leaf_capacity,
            len: 0,
            splits: 0,
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the tree holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Node splits so far (leaves and internal nodes).
    pub fn splits(&self) -> u64 {
        self.splits
    }

    /// The most children of an internal node.
    pub fn fan_out(&self) -> usize {
        self.fan_out
    }

    /// The most entries of a leaf.
    pub fn leaf_capacity(&self) -> usize {
        self.leaf_capacity
    }

    /// Inserts `entry` after any entries of equal key, splitting the nodes
    /// that overflow on the way back up.
    pub fn insert(&mut self, entry: E) {
        // Every internal node has two children or more, so the path is
        // shorter than the bits of a length.
        let mut path = [(0usize, 0usize); usize::BITS as usize];
        let mut depth = 0;
        let mut node = self.root;
        while let Node::Internal { separators, children } = &self.nodes[node] {
            let index = separators.partition_point(|&separator| separator <= entry.key());
            path[depth] = (node, index);
            depth += 1;
            node = children[index];
        }
        let Node::Leaf { entries, .. } = &mut self.nodes[node] else {
            unreachable!("the descent ends at a leaf")
        };
        // Shifted in from the end, as an insertion sort does: the leaf's
        // lines are touched in one sequential sweep (which the processor
        // prefetches), only from the end down to the entry's place, where
        // a binary search would wait on a cache miss at every probe and
        // the move after it would touch the same lines again.
        entries.push(entry);
        let mut at = entries.len() - 1;
        while at > 0 && entries[at - 1].key() > entry.key() {
            entries[at] = entries[at - 1];
            at -= 1;
        }
        entries[at] = entry;
        self.len += 1;
        if entries.len() <= self.leaf_capacity {
            return;
        }
        let mut promoted = self.split_leaf(node);
        while let Some((separator, right)) = promoted {
            promoted = match depth.checked_sub(1) {
                Some(up) => {
                    depth = up;
                    let (parent, index) = path[up];
                    self.add_child(parent, index, separator, right)
                }
                None => {
                    let left = self.root;
                    self.root = self.push(Node::Internal {
                        separators: vec![separator],
                        children: vec![left, right],
                    });
                    None
                }
            };
        }
    }

    fn push(&mut self, node: Node<E>) -> usize {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    /// Moves the upper half of leaf `node` to a new leaf after it; returns
    /// the new leaf's first key and id.
    fn split_leaf(&mut self, node: usize) -> Option<(u64, usize)> {
        self.splits += 1;
        let new_id = self.nodes.len();
        let Node::Leaf { entries, next } = &mut self.nodes[node] else {
            unreachable!("a leaf")
        };
        let mut upper = Vec::with_capacity(self.leaf_capacity + 1);
        upper.extend(entries.drain(entries.len() / 2..));
        let after = next.replace(new_id);
        let separator = upper[0].key();
        self.push(Node::Leaf {
            entries: upper,
            next: after,
        });
        Some((separator, new_id))
    }

    /// Adds child `right` after child `index` of `parent`, splitting the
    /// parent if it now has too many children; returns what the split
    /// promotes.
    fn add_child(
        &mut self,
        parent: usize,
        index: usize,
        separator: u64,
        right: usize,
    ) -> Option<(u64, usize)> {
        let fan_out = self.fan_out;
        let Node::Internal { separators, children } = &mut self.nodes[parent] else {
            unreachable!("parents are internal")
        };
        separators.insert(index, separator);
        children.insert(index + 1, right);
        if children.len() <= fan_out {
            return None;
        }
        self.splits += 1;
        let middle = separators.len() / 2;
        let upper_separators = separators.split_off(middle + 1);
        let promoted = separators.pop().expect("the middle separator");
        let upper_children = children.split_off(middle + 1);
        let new_id = self.push(Node::Internal {
            separators: upper_separators,
            children: upper_children,
        });
        Some((promoted, new_id))
    }

    /// Calls `visit` on every entry with `low <= key <= high`, in key order.
    pub fn range(&self, low: u64, high: u64, mut visit: impl FnMut(&E)) {
        let mut node = self.root;
        while let Node::Internal { separators, children } = &self.nodes[node] {
            node = children[separators.partition_point(|&separator| separator < low)];
        }
        let mut leaf = Some(node);
        while let Some(id) = leaf {
            let Node::Leaf { entries, next } = &self.nodes[id] else {
                unreachable!("the chain links leaves")
            };
            let start = entries.partition_point(|entry| entry.key() < low);
            for entry in &entries[start..] {
                if entry.key() > high {
                    return;
                }
                visit(entry);
            }
            leaf = *next;
        }
    }

    /// The lowest key each leaf may hold, left to right (0 for the first):
    /// the separator to its left in the nearest internal node above it
    /// that has one.
    pub(crate) fn leaf_lows(&self) -> Vec<u64> {
        let mut lows = Vec::new();
        // (node, the lowest key under it), the leftmost on top.
        let mut pending = vec![(self.root, 0u64)];
        while let Some((node, low)) = pending.pop() {
            match &self.nodes[node] {
                Node::Leaf { .. } => lows.push(low),
                Node::Internal { separators, children } => {
                    for (index, &child) in children.iter().enumerate().rev() {
                        let child_low = index.checked_sub(1).map_or(low, |before| separators[before]);
                        pending.push((child, child_low));
                    }
                }
            }
        }
        lows
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::entry;

    #[test]
    fn splits_keep_every_entry_in_order_duplicates_included() {
        let mut tree = BPlusTree::new(4, 4);
        let mut oracle = Vec::new();
        let mut state = 7u64;
        for location in 0..3_000 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let key = (state >> 33) % 500; // many duplicates
            tree.insert(entry(key, location));
            oracle.push(entry(key, location));
        }
        oracle.sort_by_key(|entry| entry.key); // stable: arrival order within a key
        assert_eq!(tree.len(), 3_000);
        assert!(tree.splits() > 100);
        let mut all = Vec::new();
        tree.range(0, u64::MAX, |entry| all.push(*entry));
        assert_eq!(all, oracle);
        for (low, high) in [(0, 0), (17, 17), (100, 250), (499, 1_000), (600, 700)] {
            let mut got = Vec::new();
            tree.range(low, high, |entry| got.push(*entry));
            let want: Vec<Entry> = oracle
                .iter()
                .copied()
                .filter(|e| (low..=high).contains(&e.key))
                .collect();
            assert_eq!(got, want, "{low}..={high}");
        }
        assert_eq!(
            tree.leaf_lows().len(),
            tree.nodes
                .iter()
                .filter(|n| matches!(n, Node::Leaf { .. }))
                .count()
        );
    }
}
