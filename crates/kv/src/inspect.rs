//! `verify`: an offline consistency check of everything a store holds.

use spillway_core::Result;

use crate::list;
use crate::store::Store;

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
