//! Parallel Scan and Backtrack (the seed's Algorithm 5), one query at a
//! time; on a CPU the "parallel" is a node's children and a leaf's points
//! evaluated in one loop each.
//!
//! Leaves are scanned left to right in depth-first order, each at most
//! once: `visited` is the largest leaf id scanned or pruned so far. From a
//! node, the search descends to its leftmost child that still has an
//! unvisited leaf and is within the pruning distance; a node with none
//! marks its whole subtree visited and the search backtracks to its parent
//! (no stack: parent links and `visited` are the whole state). After a
//! leaf, while its scan changed the answer, the search scans on into the
//! right neighbour leaf if that one is within the pruning distance.
//!
//! Fixes to the listing (DESIGN.md has the list): `visited` starts at -1
//! (no leaf is visited); the chosen child is held apart until found; a node
//! with no child to visit marks its subtree visited (else its parent would
//! enter it again forever); the search ends when the root has no child to
//! visit or the last leaf was scanned; the last leaf has no right
//! neighbour; a leaf's loop runs over its points; pruning compares with
//! `<=`, so that ties and duplicate points are kept; the leaf that gave the
//! initial bound keeps its points in the answer and is not scanned again.

use crate::search::Scan;
use crate::search::Searcher;

impl<T: Scan> Searcher<'_, T> {
    pub fn psb(&mut self, query: &[f64]) {
        let scanned = self.initial_bound(query);
        let tree = self.tree;
        let last_leaf = tree.leaves() as i64 - 1;
        let mut visited: i64 = -1;
        let mut node = 0u32;
        loop {
            // Down to a leaf, or up and out.
            while !self.is_leaf(node) {
                self.evaluate_children(query, node);
                let first = tree.child_first[node as usize];
                let tau = self.pruning();
                let pick = (0..self.lower.len()).find(|&i| {
                    i64::from(tree.leaf_last[(first + i as u32) as usize]) > visited && self.lower[i] <= tau
                });
                if let Some(i) = pick {
                    node = first + i as u32;
                    continue;
                }
                visited = visited.max(i64::from(tree.leaf_last[node as usize]));
                if node == 0 {
                    return;
                }
                node = tree.parent[node as usize];
            }
            // Scan leaves rightwards while they keep improving the answer.
            let mut leaf = node - tree.leaf_node(0);
            loop {
                // The initial leaf's points are in the answer already; it
                // counts as changed, as the nearest leaf usually would.
                let changed = Some(leaf) == scanned || self.scan_leaf(query, leaf);
                visited = i64::from(leaf);
                if !(changed && visited < last_leaf) {
                    break;
                }
                let right = tree.leaf_node(leaf + 1);
                if self.lower_bound(query, right) > self.pruning() {
                    break;
                }
                leaf += 1;
            }
            if visited == last_leaf {
                return;
            }
            node = tree.parent[tree.leaf_node(leaf) as usize];
        }
    }
}
