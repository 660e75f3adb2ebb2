//! A list as a node holds it ([`ListRef`]: a run of a file's blocks and
//! a hash range), a GET in it, and reading it in order ([`ListCursor`]).

use std::fmt;
use std::sync::Arc;

use spillway_core::{FsFile, Hash64, Result};

use super::{ListFile, READ_CHUNK_BYTES};
use crate::cache::FileCache;
use crate::collapse::Source;
use crate::record::{self, Kind, RecordRef, RecordSpan};

/// A list as a node holds it: a run of a file's blocks, and the hash range
/// of its records that belong to the node.
#[derive(Debug, Clone)]
pub struct ListRef {
    /// The file.
    pub file: Arc<ListFile>,
    /// First block of the run.
    pub first_block: u32,
    /// One past the last block of the run.
    pub end_block: u32,
    /// Lowest hash that belongs to the node.
    pub low: Hash64,
    /// Highest hash that belongs to the node.
    pub high: Hash64,
}

impl ListRef {
    /// The whole of `file`.
    pub fn whole(file: Arc<ListFile>) -> ListRef {
        let (low, high) = file.hash_range();
        let end_block = file.blocks();
        ListRef {
            file,
            first_block: 0,
            end_block,
            low,
            high,
        }
    }

    /// Whether `other` is the same run of the same file over the same hashes.
    pub fn same_run(&self, other: &ListRef) -> bool {
        Arc::ptr_eq(&self.file, &other.file)
            && (self.first_block, self.end_block, self.low, self.high)
                == (other.first_block, other.end_block, other.low, other.high)
    }

    /// Bytes of the run's blocks (what the list costs its node).
    pub fn bytes(&self) -> u64 {
        self.file.block_offset(self.end_block) - self.file.block_offset(self.first_block)
    }

    /// The records of the run, estimated from its share of the file's
    /// blocks (exact for a whole file).
    pub fn records(&self) -> u64 {
        let file = &self.file;
        if self.first_block == 0 && self.end_block == file.blocks() {
            return file.records();
        }
        let share = self.bytes() as f64 / file.block_offset(file.blocks()).max(1) as f64;
        ((file.records() as f64 * share).ceil() as u64).max(1)
    }

    /// The part of this list within `low..=high`, or `None` if no block of
    /// it can hold such a hash.
    pub fn narrow(&self, low: Hash64, high: Hash64) -> Option<ListRef> {
        let low = low.max(self.low);
        let high = high.min(self.high);
        if low > high {
            return None;
        }
        let file = &self.file;
        if file.is_damaged() {
            // No index to cut by: the run stays, its hashes narrow.
            return Some(ListRef {
                low,
                high,
                ..self.clone()
            });
        }
        let first = file
            .block_for(low, self.first_block, self.end_block)
            .unwrap_or(self.first_block);
        let hashes = &file.first_hashes[first as usize..self.end_block as usize];
        let end = first + hashes.partition_point(|&first_hash| first_hash <= high) as u32;
        (end > first).then(|| ListRef {
            file: self.file.clone(),
            first_block: first,
            end_block: end,
            low,
            high,
        })
    }

    /// The run's first hash at or above which half its blocks start: a
    /// fast split's separator (the median of the list, read from the
    /// first-hash index without touching the disk). `None` if the run
    /// cannot be cut so that both sides keep a hash.
    pub fn median_hash(&self) -> Option<Hash64> {
        if self.file.is_damaged() {
            return None;
        }
        let middle = (self.first_block + self.end_block) / 2;
        let hash = self.file.first_hashes[middle as usize];
        (hash > self.low && hash <= self.high).then_some(hash)
    }

    /// Asks for the filter block a GET of `hash` tests (see
    /// [`Bloom::prefetch`]).
    #[inline]
    pub fn prefetch_filter(&self, hash: Hash64) {
        if (self.low..=self.high).contains(&hash) {
            self.file.bloom.prefetch(hash);
        }
    }

    /// Calls `found` with the record of `key` (hash `hash`) in this list,
    /// if it holds one. Returns how many blocks it read (0 when the filter
    /// rules the list out).
    pub fn get(
        &self,
        cache: &FileCache,
        hash: Hash64,
        key: &[u8],
        buffer: &mut Vec<u8>,
        mut found: impl FnMut(Kind, &[u8]),
    ) -> Result<u32> {
        if hash < self.low || hash > self.high {
            return Ok(0);
        }
        if let Some(error) = self.file.damage_error() {
            return Err(error);
        }
        if !self.file.may_contain(hash) {
            return Ok(0);
        }
        let Some(mut block) = self.file.block_for(hash, self.first_block, self.end_block) else {
            return Ok(0);
        };
        let handle = cache.handle(self.file.number(), self.file.path())?;
        let mut reads = 0;
        loop {
            let records = self.file.read_block(handle.as_ref(), block, buffer)?;
            reads += 1;
            let offset = self.file.block_offset(block);
            let mut at = records.start;
            while at < records.end {
                let (record, used) = record::decode(&buffer[at..records.end])
                    .map_err(|error| error.at(self.file.path(), offset))?;
                if record.hash > hash {
                    return Ok(reads);
                }
                if record.hash == hash && record.key == key {
                    found(record.kind, record.value);
                    return Ok(reads);
                }
                at += used;
            }
            // The run of `hash` may go on in the next block.
            block += 1;
            if block >= self.end_block || self.file.first_hashes[block as usize] != hash {
                return Ok(reads);
            }
        }
    }

    /// A cursor over the list's records in `low..=high`.
    pub fn cursor(&self, cache: &FileCache) -> Result<ListCursor> {
        if let Some(error) = self.file.damage_error() {
            return Err(error);
        }
        Ok(ListCursor {
            handle: cache.handle(self.file.number(), self.file.path())?,
            list: self.clone(),
            next_block: self.first_block,
            chunk: Vec::new(),
            blocks: Vec::new(),
            block: 0,
            at: 0,
            current: None,
        })
    }
}

/// Reads a list's records in order, a chunk of blocks at a time, checking
/// each block's checksum; skips the records outside the list's range.
pub struct ListCursor {
    pub(super) list: ListRef,
    pub(super) handle: Arc<dyn FsFile>,
    pub(super) next_block: u32,
    pub(super) chunk: Vec<u8>,
    /// The records of each block in `chunk`, with the block's file offset.
    pub(super) blocks: Vec<(std::ops::Range<usize>, u64)>,
    pub(super) block: usize,
    pub(super) at: usize,
    pub(super) current: Option<RecordSpan>,
}

impl fmt::Debug for ListCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListCursor")
            .field("file", &self.list.file.number)
            .field("next_block", &self.next_block)
            .finish()
    }
}

impl Source for ListCursor {
    #[inline]
    fn record(&self) -> Option<RecordRef<'_>> {
        self.current.map(|current| current.record(&self.chunk))
    }

    /// Moves to the next record in range (the first, on a new cursor).
    fn advance(&mut self) -> Result<()> {
        loop {
            if self.block < self.blocks.len() {
                let (records, offset) = self.blocks[self.block].clone();
                if self.at < records.end {
                    let bytes = &self.chunk[self.at..records.end];
                    let (record, used) =
                        record::decode(bytes).map_err(|error| error.at(self.list.file.path(), offset))?;
                    self.at += used;
                    if record.hash < self.list.low {
                        continue;
                    }
                    if record.hash > self.list.high {
                        break;
                    }
                    self.current = Some(RecordSpan::of(&record, &self.chunk));
                    return Ok(());
                }
                self.block += 1;
                if let Some((records, _)) = self.blocks.get(self.block) {
                    self.at = records.start;
                }
                continue;
            }
            if self.next_block >= self.list.end_block {
                break;
            }
            self.read_chunk()?;
        }
        self.current = None;
        self.next_block = self.list.end_block;
        self.blocks.clear();
        Ok(())
    }
}

impl ListCursor {
    /// Reads the next blocks, up to [`READ_CHUNK_BYTES`] (at least one).
    pub(super) fn read_chunk(&mut self) -> Result<()> {
        let file = &self.list.file;
        let first = self.next_block;
        let start = file.block_offset(first);
        let mut end_block = first + 1;
        while end_block < self.list.end_block
            && file.block_offset(end_block + 1) - start <= READ_CHUNK_BYTES as u64
        {
            end_block += 1;
        }
        let end = file.block_offset(end_block);
        self.chunk.clear();
        self.handle
            .read_exact_append(&mut self.chunk, (end - start) as usize, start)?;
        self.blocks.clear();
        for block in first..end_block {
            let offset = file.block_offset(block);
            let records = file.check_block(&self.chunk, (offset - start) as usize, offset)?;
            self.blocks.push((records, offset));
        }
        self.next_block = end_block;
        self.block = 0;
        self.at = self.blocks[0].0.start;
        // The handle reads no further than asked (cache.rs): ask for the
        // next chunk of the range now, so that it arrives while this one
        // is interleaved.
        if self.next_block < self.list.end_block {
            let next = file.block_offset(self.next_block);
            let range_end = file.block_offset(self.list.end_block);
            let len = (range_end - next).min(READ_CHUNK_BYTES as u64);
            self.handle.prefetch(next, len)?;
        }
        Ok(())
    }
}
