//! Looking inside a store: `verify` (a consistency check of everything it
//! holds) and `describe` (the tree's shape, for `spillway kv dump`).

use std::collections::BTreeSet;

use serde::{Serialize, Serializer};
use spillway_core::{Error, Hash64, Interrupt, Result};

use crate::list::FileNumber;
use crate::store::Store;
use crate::tree::{NodeId, ROOT};

/// A list as `describe` shows it (serialized, as `spillway kv dump --json`
/// shows it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ListDescription {
    /// The file.
    pub file: FileNumber,
    /// The first of the file's blocks the list covers.
    pub block_first: u32,
    /// The block after the last it covers.
    pub block_end: u32,
    /// The hashes that belong to the node.
    #[serde(skip)] // the node's own range, shown once on the node
    pub hashes: (Hash64, Hash64),
    /// Bytes of its blocks.
    pub bytes: u64,
    /// Records (estimated for part of a shared file).
    pub records: u64,
}

/// A node as `describe` shows it (serialized, as `spillway kv dump --json`
/// shows it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NodeDescription {
    /// Its number (0 is the root).
    pub id: NodeId,
    /// Levels below the root.
    pub depth: u32,
    /// The lowest hash it owns.
    #[serde(serialize_with = "hex")] // JSON readers keep 53 bits of a number
    pub low: Hash64,
    /// The highest hash it owns (inclusive).
    #[serde(serialize_with = "hex")]
    pub high: Hash64,
    /// Its children's numbers (none for a leaf).
    pub children: Vec<NodeId>,
    /// Its lists, oldest first.
    pub lists: Vec<ListDescription>,
    /// Fast splits since its lineage last split slowly.
    pub fast_splits: u32,
}

/// What [`Store::verify`] checked.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
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
    /// Files in the directory that the tree and the chain of logs make
    /// redundant (list files the tree does not name, logs already in the
    /// tree, older manifests: left by a crash, or still read when they
    /// became obsolete): the next open for writing removes them.
    pub unreferenced_files: Vec<String>,
    /// Files that cannot be accounted for (another store's, logs off the
    /// chain, names that look like store files but are not), each with
    /// why: reported, and kept by every open.
    pub unaccounted_files: Vec<String>,
    /// The logs of the chain, oldest first.
    pub logs: Vec<String>,
    /// Nodes that background work found damaged (see `KvStats::damage`).
    pub damage: Vec<String>,
}

/// A hash as 16 hexadecimal digits, as the text dump shows it: a 64-bit
/// hash as a JSON number would reach most readers rounded.
fn hex<S: Serializer>(hash: &Hash64, serializer: S) -> std::result::Result<S::Ok, S::Error> {
    serializer.serialize_str(&format!("{hash:016x}"))
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
                low: node.low,
                high: node.high,
                children: node.children.iter().map(|child| child.id).collect(),
                lists: node
                    .lists
                    .iter()
                    .map(|list| ListDescription {
                        file: list.file.number(),
                        block_first: list.first_block,
                        block_end: list.end_block,
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

    /// Runs the checks an open runs (recovery.rs: the manifest, the list
    /// files it names, the chain of logs, every other file accounted for)
    /// on the directory as it is now, then checks the tree's structure and
    /// reads every list file whole, checking every block, record, index,
    /// filter and sketch (see `ListFile::verify`). Damage is a `Corruption`
    /// error naming the file and offset, the same error an open reports.
    pub fn verify(&self) -> Result<VerifyReport> {
        self.verify_interruptible(&Interrupt::new())
    }

    /// [`verify`](Self::verify), stopping with `Interrupted` once
    /// `interrupt` is raised (checked between blocks).
    pub fn verify_interruptible(&self, interrupt: &Interrupt) -> Result<VerifyReport> {
        let (checked, (active, frozen, tree)) = self.check_directory()?;
        tree.check_invariants()?;
        let files = tree.files();
        let named: BTreeSet<FileNumber> = checked.recovered.tree.files().into_keys().collect();
        let held: BTreeSet<FileNumber> = files.keys().copied().collect();
        if named != held {
            return Err(Error::Internal(format!(
                "the manifest names list files {named:?}, the store in memory holds {held:?}"
            )));
        }
        let mut report = VerifyReport {
            nodes: tree.len() as u64,
            leaves: tree.leaves().len() as u64,
            lists: tree.nodes().map(|node| node.lists.len() as u64).sum(),
            root_records: (active.len() + frozen.as_ref().map_or(0, |root| root.len())) as u64,
            unreferenced_files: checked.removable,
            unaccounted_files: checked.unaccounted,
            logs: checked
                .chain
                .iter()
                .map(|&number| crate::wal::file_name(number))
                .collect(),
            damage: self.stats().damage,
            ..VerifyReport::default()
        };
        for number in held {
            let file = &files[&number];
            interrupt.check()?;
            if let Some(error) = file.damage_error() {
                return Err(error);
            }
            let handle = self.cache().handle(file.number(), file.path())?;
            report.records += file.verify(handle.as_ref(), interrupt)?;
            report.files += 1;
        }
        Ok(report)
    }
}
