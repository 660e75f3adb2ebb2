//! Looking inside a store: `verify` (a consistency check of everything it
//! holds) and `describe` (the tree's shape, for `spillway kv dump`).

use spillway_core::{Hash64, Result};

use crate::list::{self, FileNumber};
use crate::store::Store;
use crate::tree::{NodeId, ROOT};

/// A list as `describe` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListDescription {
    /// The file.
    pub file: FileNumber,
    /// Its blocks the list covers, `first..end`.
    pub blocks: (u32, u32),
    /// The hashes that belong to the node.
    pub hashes: (Hash64, Hash64),
    /// Bytes of its blocks.
    pub bytes: u64,
    /// Records (estimated for part of a shared file).
    pub records: u64,
}

/// A node as `describe` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeDescription {
    /// Its number (0 is the root).
    pub id: NodeId,
    /// Levels below the root.
    pub depth: u32,
    /// The hashes it owns.
    pub hashes: (Hash64, Hash64),
    /// Its children's numbers (none for a leaf).
    pub children: Vec<NodeId>,
    /// Its lists, oldest first.
    pub lists: Vec<ListDescription>,
    /// Fast splits since its lineage last split slowly.
    pub fast_splits: u32,
}

/// What [`Store::verify`] checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Nodes (the root included).
    pub nodes: u64,
    /// Leaves.
    pub leaves: u64,
    /// Lists held by nodes.
    pub lists: u64,
    /// List files read whole.
    pub files: u64,
    /// Records in them.
    pub records: u64,
    /// Records in the root buffers.
    pub root_records: u64,
    /// List files in the directory that the tree does not refer to (left
    /// by a crash or by files still read when they became obsolete; the
    /// next open removes them).
    pub unreferenced_files: Vec<String>,
}

impl Store {
    /// The tree's nodes, top down and in hash order, with their lists.
    pub fn describe(&self) -> Vec<NodeDescription> {
        let (_, _, tree) = self.snapshot();
        let mut nodes = Vec::with_capacity(tree.len());
        let mut stack = vec![(ROOT, 0u32)];
        while let Some((id, depth)) = stack.pop() {
            let node = tree.node(id);
            nodes.push(NodeDescription {
                id,
                depth,
                hashes: (node.low, node.high),
                children: node.children.iter().map(|child| child.id).collect(),
                lists: node
                    .lists
                    .iter()
                    .map(|list| ListDescription {
                        file: list.file.number(),
                        blocks: (list.first_block, list.end_block),
                        hashes: (list.low, list.high),
                        bytes: list.bytes(),
                        records: list.records(),
                    })
                    .collect(),
                fast_splits: node.fast_splits,
            });
            stack.extend(node.children.iter().rev().map(|child| (child.id, depth + 1)));
        }
        nodes
    }

    /// Checks the tree's structure and reads every list file whole,
    /// checking every block, record, index, filter and sketch (see
    /// `ListFile::verify`). The logs were checked when the store opened.
    /// Damage is a `Corruption` error naming the file and offset.
    pub fn verify(&self) -> Result<VerifyReport> {
        let (active, frozen, tree) = self.snapshot();
        tree.check_invariants()?;
        let files = tree.files();
        let mut report = VerifyReport {
            nodes: tree.len() as u64,
            leaves: tree.leaves().len() as u64,
            lists: tree.nodes().map(|node| node.lists.len() as u64).sum(),
            root_records: (active.len() + frozen.as_ref().map_or(0, |root| root.len())) as u64,
            ..VerifyReport::default()
        };
        let mut numbers: Vec<_> = files.keys().copied().collect();
        numbers.sort_unstable();
        for number in numbers {
            let file = &files[&number];
            let handle = self.cache().handle(file)?;
            report.records += file.verify(handle.as_ref())?;
            report.files += 1;
        }
        let mut unreferenced: Vec<String> = self
            .fs()
            .list_dir(self.dir())?
            .into_iter()
            .filter(|name| list::parse_name(name).is_some_and(|number| !files.contains_key(&number)))
            .collect();
        unreferenced.sort();
        report.unreferenced_files = unreferenced;
        Ok(report)
    }
}
