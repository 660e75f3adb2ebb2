//! Unordered scans: every live key once, with its value, in hash order
//! (the store keeps no key order; seed 001 §1), from one consistent
//! snapshot taken when the scan starts.
//!
//! The scan goes one leaf at a time: the records in the leaf's hash range
//! come from the leaf's lists, the lists of every node above it, and the
//! root buffers, interleaved oldest to newest and collapsed as a GET would.

use std::sync::Arc;

use spillway_core::Result;

use crate::cache::FileCache;
use crate::collapse::{Interleaver, Source};
use crate::merge::MergeOperator;
use crate::record::Kind;
use crate::root::{RootBuffer, SortedOrder, SortedRun};
use crate::store::Store;
use crate::tree::{NodeId, Tree};

/// An iterator over a store's live keys and values, in hash order. It
/// holds its snapshot, not the store: it may outlive a borrow of it (the
/// Python binding keeps one between calls).
pub struct Scan {
    cache: Arc<FileCache>,
    tree: Arc<Tree>,
    /// The root buffers, oldest first, each with its sorted order.
    roots: Vec<(Arc<RootBuffer>, Arc<SortedOrder>)>,
    leaves: Vec<NodeId>,
    next_leaf: usize,
    interleaver: Option<Interleaver>,
    merge: Option<Arc<dyn MergeOperator>>,
    done: bool,
}

impl std::fmt::Debug for Scan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scan")
            .field("leaves", &self.leaves.len())
            .field("next_leaf", &self.next_leaf)
            .finish()
    }
}

impl Store {
    /// Every live key and its value, in hash order, as of now. Writes made
    /// while the scan runs are not in it; the files it reads stay until
    /// it is dropped.
    pub fn scan(&self) -> Result<Scan> {
        let (active, frozen, tree) = self.snapshot();
        let mut roots = Vec::with_capacity(2);
        for root in frozen.into_iter().chain([active]) {
            let order = Arc::new(root.sorted());
            roots.push((root, order));
        }
        Ok(Scan {
            cache: self.cache().clone(),
            leaves: tree.leaves(),
            tree,
            roots,
            next_leaf: 0,
            interleaver: None,
            merge: self.options().merge_operator.clone(),
            done: false,
        })
    }
}

impl Scan {
    /// An interleaver over everything in leaf `id`'s hash range, oldest first.
    fn leaf_interleaver(&self, id: NodeId) -> Result<Interleaver> {
        let leaf = self.tree.node(id);
        let mut path = Vec::new();
        self.tree.walk(leaf.low, |node| {
            path.push(node.id);
            Ok(node.id != id)
        })?;
        let mut sources: Vec<Box<dyn Source>> = Vec::new();
        for &node in path.iter().rev() {
            for list in &self.tree.node(node).lists {
                if let Some(part) = list.narrow(leaf.low, leaf.high) {
                    sources.push(Box::new(part.cursor(&self.cache)?));
                }
            }
        }
        for (root, order) in &self.roots {
            sources.push(Box::new(SortedRun::new(
                root.clone(),
                order.clone(),
                leaf.low,
                leaf.high,
                self.merge.clone(),
            )));
        }
        Interleaver::new(sources, self.merge.clone())
    }

    fn next_entry(&mut self) -> Result<Option<(Vec<u8>, Vec<u8>)>> {
        loop {
            if let Some(interleaver) = &mut self.interleaver {
                while let Some(record) = interleaver.next_record()? {
                    if record.kind != Kind::Delete {
                        return Ok(Some((record.key.to_vec(), record.value.to_vec())));
                    }
                }
                self.interleaver = None;
            }
            let Some(&leaf) = self.leaves.get(self.next_leaf) else {
                return Ok(None);
            };
            self.next_leaf += 1;
            self.interleaver = Some(self.leaf_interleaver(leaf)?);
        }
    }
}

impl Iterator for Scan {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.next_entry() {
            Ok(Some(entry)) => Some(Ok(entry)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(error) => {
                self.done = true;
                Some(Err(error))
            }
        }
    }
}
