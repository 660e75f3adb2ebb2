//! Spills (seed 001 §3.2.1): a full node's records move down one level.
//!
//! - The root spills its buffer: sorted by hash, collapsed, cut by the
//!   children's hash ranges, each part written as a new list of its child.
//! - An internal node spills its lists: interleaved (collapsing) into one
//!   sequence, cut the same way, one new list per child. The children's
//!   data is never read.
//!
//! Either way the node is empty afterwards, and the edit names the node
//! and every child that got a list.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use spillway_core::sync;
use spillway_core::{Fs, Hash64, Result};

use crate::cache::FileCache;
use crate::collapse::{Interleaver, Source};
use crate::list::{FileNumber, ListFile, ListMeta, ListRef, ListWriter};
use crate::merge::MergeOperator;
use crate::options::Options;
use crate::record::{Kind, RecordRef};
use crate::root::{RootBuffer, SortedOrder, SortedRun};
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
    /// The store's identity, for the lists' footers.
    pub store_id: u64,
    /// Every file number this job (and its parts) took, finished or not:
    /// the files to remove if it fails.
    pub allocated: Arc<Mutex<Vec<FileNumber>>>,
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
    /// A writer for a new list file written for the hashes `cover`, of the
    /// writes `seqs` (first and last sequence numbers).
    pub fn list_writer(&self, cover: (Hash64, Hash64), seqs: (u64, u64)) -> Result<ListWriter> {
        let number = self.next_file.fetch_add(1, Ordering::Relaxed);
        sync::lock(&self.allocated).push(number);
        ListWriter::create(
            self.fs,
            self.dir,
            number,
            self.options.block_bytes,
            self.options.filter_bits(),
            ListMeta {
                store_id: self.store_id,
                seq_min: seqs.0,
                seq_max: seqs.1,
                cover_low: cover.0,
                cover_high: cover.1,
            },
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

    /// Threads a root spill or a slow split may use (`spill_threads`).
    pub fn threads(&self) -> usize {
        spillway_core::worker_threads(self.options.spill_threads)
    }

    /// A job for another thread's part of this one's work: the same store,
    /// nothing written or read yet ([`absorb`](Self::absorb) it back).
    fn part(&self) -> Job<'a> {
        Job {
            merge: self.merge.clone(),
            allocated: self.allocated.clone(),
            written: Vec::new(),
            records_in: 0,
            bytes_read: 0,
            ..*self
        }
    }

    /// Takes in what a [`part`](Self::part) did.
    fn absorb(&mut self, part: Job<'a>) {
        self.written.extend(part.written);
        self.records_in += part.records_in;
        self.bytes_read += part.bytes_read;
    }

    /// An interleaver over the lists of `node`, oldest first.
    pub fn interleave_lists(&mut self, node: &Node) -> Result<Interleaver> {
        let mut sources: Vec<Box<dyn Source>> = Vec::with_capacity(node.lists.len());
        for list in &node.lists {
            self.bytes_read += list.bytes();
            sources.push(Box::new(list.cursor(self.cache)?));
        }
        Interleaver::new(sources, self.merge.clone())
    }
}

/// The first and last sequence numbers of the writes `lists` may hold:
/// what a list interleaved from them records (list/).
pub fn seqs_of(lists: &[ListRef]) -> (u64, u64) {
    lists
        .iter()
        .map(|list| list.file.meta())
        .fold(None, |seqs: Option<(u64, u64)>, meta| {
            Some(seqs.map_or((meta.seq_min, meta.seq_max), |(low, high)| {
                (low.min(meta.seq_min), high.max(meta.seq_max))
            }))
        })
        .unwrap_or((0, 0))
}

/// Writes an interleaved sequence of the writes `seqs` into one new list per
/// child of `node` that gets records; returns the children that got one,
/// with their files.
fn partition(
    job: &mut Job<'_>,
    interleaver: &mut Interleaver,
    node: &Node,
    seqs: (u64, u64),
) -> Result<Vec<(usize, Arc<ListFile>)>> {
    let mut files = Vec::new();
    let mut child = 0;
    let mut high = node.child_high(0);
    let mut writer: Option<ListWriter> = None;
    while let Some(record) = interleaver.next_record()? {
        if record.hash > high {
            if let Some(full) = writer.take() {
                files.push((child, job.finish(full)?));
            }
            child = node.child_index(record.hash);
            high = node.child_high(child);
        }
        if writer.is_none() {
            let cover = (node.children[child].low, node.child_high(child));
            writer = Some(job.list_writer(cover, seqs)?);
        }
        writer.as_mut().expect("a writer is open").add(&record)?;
    }
    if let Some(last) = writer {
        files.push((child, job.finish(last)?));
    }
    job.records_in += interleaver.records_in();
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

/// Spills a frozen root buffer into the root's children, on up to
/// [`Job::threads`] threads: each writes the lists of a run of children with
/// about as many records as the others'. On 2 cores the root spill is
/// most of the worker's time, and the writer leaves a core idle while it
/// waits for each sync.
/// `seqs` are the first and last sequence numbers of the writes it holds.
pub fn spill_root(job: &mut Job<'_>, tree: &Tree, root: Arc<RootBuffer>, seqs: (u64, u64)) -> Result<Edit> {
    let node = tree.root();
    let order = Arc::new(root.sorted());
    let parts = part_ranges(&order, node, job.threads());
    let files = in_parts(job, &parts, |job, &(low, high)| {
        let run = SortedRun::new(root.clone(), order.clone(), low, high, job.merge.clone());
        let mut interleaver = Interleaver::new(vec![Box::new(run)], job.merge.clone())?;
        partition(job, &mut interleaver, node, seqs)
    })?
    .concat();
    Ok(Edit {
        nodes: append_to_children(tree, node, files),
        removed: Vec::new(),
    })
}

/// Does `work` for each of `parts`, each on a thread of its own (inline
/// when there is one part), with a [`Job::part`] each absorbed into `job`
/// afterwards; returns the results in the order of `parts`.
pub fn in_parts<'a, P: Sync, T: Send>(
    job: &mut Job<'a>,
    parts: &[P],
    work: impl Fn(&mut Job<'a>, &P) -> Result<T> + Sync,
) -> Result<Vec<T>> {
    if let [only] = parts {
        return Ok(vec![work(job, only)?]);
    }
    let done: Vec<Result<(Job<'a>, T)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = parts
            .iter()
            .map(|input| {
                let mut part = job.part();
                let work = &work;
                scope.spawn(move || {
                    // Background work, as the worker's (worker.rs).
                    spillway_core::prefer_throughput();
                    work(&mut part, input).map(|output| (part, output))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join().expect("a spill or split thread panicked"))
            .collect()
    });
    let mut outputs = Vec::with_capacity(parts.len());
    for result in done {
        let (part, output) = result?;
        job.absorb(part);
        outputs.push(output);
    }
    Ok(outputs)
}

/// Records a root spill gives a thread at least: far more work than
/// starting the thread (tens of microseconds).
const PART_RECORDS_MIN: usize = 1 << 10;

/// Cuts the hash space into up to `threads` ranges of whole children of
/// `node`, each with about as many of `order`'s records.
fn part_ranges(order: &SortedOrder, node: &Node, threads: usize) -> Vec<(Hash64, Hash64)> {
    let parts = threads.min(order.len() / PART_RECORDS_MIN).max(1);
    let mut starts = vec![0];
    for part in 1..parts {
        let hash = order[order.len() * part / parts].0;
        let low = node.children[node.child_index(hash)].low;
        if low > *starts.last().expect("starts is not empty") {
            starts.push(low);
        }
    }
    let mut ranges: Vec<(Hash64, Hash64)> = starts.windows(2).map(|pair| (pair[0], pair[1] - 1)).collect();
    ranges.push((*starts.last().expect("starts is not empty"), u64::MAX));
    ranges
}

/// Spills internal node `id`: interleaves its lists into new lists of its
/// children and empties it.
pub fn spill_node(job: &mut Job<'_>, tree: &Tree, id: NodeId) -> Result<Edit> {
    let node = tree.node(id);
    debug_assert!(!node.is_leaf() && id != crate::tree::ROOT);
    let mut interleaver = job.interleave_lists(node)?;
    let files = partition(job, &mut interleaver, node, seqs_of(&node.lists))?;
    let mut nodes = append_to_children(tree, node, files);
    let mut emptied = (**node).clone();
    emptied.lists.clear();
    nodes.push(emptied);
    Ok(Edit {
        nodes,
        removed: Vec::new(),
    })
}

/// Whether a record must be kept when a leaf's lists are interleaved: at the
/// bottom of the tree a tombstone shadows nothing, so it goes.
pub fn kept_at_leaf(record: &RecordRef<'_>) -> bool {
    record.kind != Kind::Delete
}
