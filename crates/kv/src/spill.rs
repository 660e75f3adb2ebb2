//! Spills (seed 001 §3.2.1): a full node's records move down one level.
//!
//! - The root spills its buffer: sorted by hash, collapsed, cut by the
//!   children's hash ranges, each part written as a new list of its child.
//! - An internal node spills its lists: merged (collapsing) into one
//!   sequence, cut the same way, one new list per child. The children's
//!   data is never read.
//!
//! Either way the node is empty afterwards, and the edit names the node
//! and every child that got a list.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use spillway_core::{Fs, Result};

use crate::cache::FileCache;
use crate::collapse::{Merger, Source};
use crate::list::{ListFile, ListRef, ListWriter};
use crate::merge::MergeOperator;
use crate::options::Options;
use crate::record::{Kind, RecordRef};
use crate::root::{RootBuffer, SortedRun};
use crate::tree::{Edit, Node, NodeId, Tree};

/// What a spill or split needs from the store, and what it did.
pub struct Job<'a> {
    /// The file system.
    pub fs: &'a dyn Fs,
    /// The store's directory.
    pub dir: &'a Path,
    /// The store's options.
    pub options: &'a Options,
    /// Open list files.
    pub cache: &'a FileCache,
    /// The store's next file number.
    pub next_file: &'a AtomicU64,
    /// The merge operator.
    pub merge: Option<Arc<dyn MergeOperator>>,
    /// Files this job wrote, in order.
    pub written: Vec<Arc<ListFile>>,
    /// Records read from lists or the root.
    pub records_in: u64,
    /// Bytes of blocks read from lists.
    pub bytes_read: u64,
}

impl std::fmt::Debug for Job<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("written", &self.written)
            .field("records_in", &self.records_in)
            .finish()
    }
}

impl<'a> Job<'a> {
    /// A writer for a new list file.
    pub fn list_writer(&self) -> Result<ListWriter> {
        let number = self.next_file.fetch_add(1, Ordering::Relaxed);
        ListWriter::create(
            self.fs,
            self.dir,
            number,
            self.options.block_bytes,
            self.options.filter_bits(),
        )
    }

    /// Finishes `writer` and remembers its file.
    pub fn finish(&mut self, writer: ListWriter) -> Result<Arc<ListFile>> {
        let file = writer.finish()?;
        self.written.push(file.clone());
        Ok(file)
    }

    /// Bytes of list blocks this job wrote.
    pub fn bytes_written(&self) -> u64 {
        self.written.iter().map(|file| file.file_bytes()).sum()
    }

    /// A merger over the lists of `node`, oldest first.
    pub fn merge_lists(&mut self, node: &Node) -> Result<Merger> {
        let mut sources: Vec<Box<dyn Source>> = Vec::with_capacity(node.lists.len());
        for list in &node.lists {
            self.bytes_read += list.bytes();
            sources.push(Box::new(list.cursor(self.cache)?));
        }
        Merger::new(sources, self.merge.clone())
    }
}

/// Writes a merged sequence into one new list per child of `node` that
/// gets records; returns the children that got one, with their files.
fn partition(job: &mut Job<'_>, merger: &mut Merger, node: &Node) -> Result<Vec<(usize, Arc<ListFile>)>> {
    let mut files = Vec::new();
    let mut child = 0;
    let mut high = node.child_high(0);
    let mut writer: Option<ListWriter> = None;
    while let Some(record) = merger.next_record()? {
        if record.hash > high {
            if let Some(full) = writer.take() {
                files.push((child, job.finish(full)?));
            }
            child = node.child_index(record.hash);
            high = node.child_high(child);
        }
        if writer.is_none() {
            writer = Some(job.list_writer()?);
        }
        writer.as_mut().expect("a writer is open").add(&record)?;
    }
    if let Some(last) = writer {
        files.push((child, job.finish(last)?));
    }
    job.records_in += merger.records_in();
    Ok(files)
}

/// Appends each new file as the newest list of its child; returns the
/// children changed.
fn append_to_children(tree: &Tree, node: &Node, files: Vec<(usize, Arc<ListFile>)>) -> Vec<Node> {
    files
        .into_iter()
        .map(|(index, file)| {
            let mut child = (**tree.node(node.children[index].id)).clone();
            child.lists.push(ListRef::whole(file));
            child
        })
        .collect()
}

/// Spills a frozen root buffer into the root's children.
pub fn spill_root(job: &mut Job<'_>, tree: &Tree, root: Arc<RootBuffer>) -> Result<Edit> {
    let node = tree.root();
    let order = Arc::new(root.sorted());
    let run = SortedRun::new(root, order, 0, u64::MAX);
    let mut merger = Merger::new(vec![Box::new(run)], job.merge.clone())?;
    let files = partition(job, &mut merger, node)?;
    Ok(Edit {
        nodes: append_to_children(tree, node, files),
        removed: Vec::new(),
    })
}

/// Spills internal node `id`: merges its lists into new lists of its
/// children and empties it.
pub fn spill_node(job: &mut Job<'_>, tree: &Tree, id: NodeId) -> Result<Edit> {
    let node = tree.node(id);
    debug_assert!(!node.is_leaf() && id != crate::tree::ROOT);
    let mut merger = job.merge_lists(node)?;
    let files = partition(job, &mut merger, node)?;
    let mut nodes = append_to_children(tree, node, files);
    let mut emptied = (**node).clone();
    emptied.lists.clear();
    nodes.push(emptied);
    Ok(Edit {
        nodes,
        removed: Vec::new(),
    })
}

/// Whether a record must be kept when a leaf's lists are merged: at the
/// bottom of the tree a tombstone shadows nothing, so it goes.
pub fn kept_at_leaf(record: &RecordRef<'_>) -> bool {
    record.kind != Kind::Delete
}
