//! Writing records of any size at any offset to a file opened with O_DIRECT.
//!
//! Direct I/O only moves whole aligned blocks from aligned addresses
//! (assumption 6 of the module docs), but engines write runs of 100-byte
//! records at arbitrary offsets, from several threads and in any order.
//! [`DirectWriter`] splits each write into its *body*, the blocks it covers
//! wholly, written straight from the caller's memory, and at most two *edges*,
//! the blocks it shares with its neighbours, which are collected in block
//! buffers and written once every byte of the block has arrived. The last,
//! partial block of the file is written zero-padded by
//! [`finish`](DirectWriter::finish), which then cuts the file to its length.
//!
//! The body can only be written from the caller's memory when the data's
//! address and its file offset agree modulo the alignment; callers that fill
//! buffers place their data with [`start_for_offset`] so that they do. Data
//! that does not agree is copied through an aligned staging buffer instead, so
//! every write works and the fast path is the caller's choice.
//!
//! Every byte must be written exactly once: an edge block is complete when the
//! number of bytes written into it reaches its size, so a byte written twice
//! would complete a block early.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::{AlignedBuffer, FsFile, DIRECT_IO_ALIGNMENT_BYTES};
use crate::{Error, Result};

const BLOCK: usize = DIRECT_IO_ALIGNMENT_BYTES as usize;
/// Largest piece of misaligned data copied through one staging buffer.
const STAGING_BYTES: usize = 1 << 20;

/// Where to start data in a buffer whose storage begins at `address` so that
/// the data's address agrees with file `offset` modulo the direct-I/O
/// alignment. Reserve the buffer's capacity first: the answer holds only
/// while the storage does not move.
pub fn start_for_offset(address: usize, offset: u64) -> usize {
    let wanted = (offset % DIRECT_IO_ALIGNMENT_BYTES) as usize;
    (wanted + BLOCK - address % BLOCK) % BLOCK
}

/// A block shared by writes that each cover part of it.
#[derive(Debug)]
struct EdgeBlock {
    data: AlignedBuffer,
    filled: usize,
}

/// Writes data at arbitrary offsets and lengths to a file opened with
/// O_DIRECT; see the module docs. Safe to share between threads.
#[derive(Debug)]
pub struct DirectWriter {
    file: Arc<dyn FsFile>,
    /// Edge blocks still missing bytes, by block number.
    edges: Mutex<BTreeMap<u64, EdgeBlock>>,
}

impl DirectWriter {
    /// A writer for `file`, which must have been opened with O_DIRECT (or be
    /// a file where direct alignment is merely respected).
    pub fn new(file: Arc<dyn FsFile>) -> Self {
        DirectWriter {
            file,
            edges: Mutex::new(BTreeMap::new()),
        }
    }

    /// The file written to.
    pub fn file(&self) -> &Arc<dyn FsFile> {
        &self.file
    }

    /// Writes `data` at `offset`. Bytes of blocks that other writes share
    /// reach the disk when the last of those writes arrives or at
    /// [`finish`](Self::finish).
    pub fn write_at(&self, data: &[u8], offset: u64) -> Result<()> {
        let end = offset + data.len() as u64;
        let body_start = offset.next_multiple_of(DIRECT_IO_ALIGNMENT_BYTES).min(end);
        let body_end = (end / DIRECT_IO_ALIGNMENT_BYTES * DIRECT_IO_ALIGNMENT_BYTES).max(body_start);
        let at = |file_offset: u64| (file_offset - offset) as usize;
        if body_start > offset {
            self.add_to_edge(&data[..at(body_start)], offset)?;
        }
        if body_end > body_start {
            self.write_body(&data[at(body_start)..at(body_end)], body_start)?;
        }
        if end > body_end {
            self.add_to_edge(&data[at(body_end)..], body_end)?;
        }
        Ok(())
    }

    /// Writes the blocks still incomplete, zero-padded (their missing bytes
    /// must lie at or past `len`), and sets the file's length to `len`.
    pub fn finish(&self, len: u64) -> Result<()> {
        let edges = std::mem::take(&mut *self.edges.lock().unwrap());
        for (block, edge) in edges {
            let start = block * DIRECT_IO_ALIGNMENT_BYTES;
            let needed = len.saturating_sub(start).min(DIRECT_IO_ALIGNMENT_BYTES);
            if edge.filled as u64 != needed {
                return Err(Error::Internal(format!(
                    "{}: block at offset {start} holds {} bytes but the file of {len} bytes needs {needed} there",
                    self.file.path().display(),
                    edge.filled,
                )));
            }
            self.file.write_at(&edge.data, start)?;
        }
        if self.file.len()? != len {
            self.file.set_len(len)?;
        }
        Ok(())
    }

    /// Writes whole blocks at an aligned `offset`, straight from `data` when
    /// its address agrees with the alignment, else through a staging copy.
    fn write_body(&self, data: &[u8], offset: u64) -> Result<()> {
        if (data.as_ptr() as usize).is_multiple_of(BLOCK) {
            return self.file.write_at(data, offset);
        }
        let mut staging = AlignedBuffer::zeroed(data.len().min(STAGING_BYTES));
        for (index, piece) in data.chunks(STAGING_BYTES).enumerate() {
            staging[..piece.len()].copy_from_slice(piece);
            self.file
                .write_at(&staging[..piece.len()], offset + (index * STAGING_BYTES) as u64)?;
        }
        Ok(())
    }

    /// Copies `data`, which lies within one block, into that block's buffer
    /// and writes the block once it is full.
    fn add_to_edge(&self, data: &[u8], offset: u64) -> Result<()> {
        let block = offset / DIRECT_IO_ALIGNMENT_BYTES;
        let within = (offset % DIRECT_IO_ALIGNMENT_BYTES) as usize;
        debug_assert!(within + data.len() <= BLOCK, "an edge lies within one block");
        let full = {
            let mut edges = self.edges.lock().unwrap();
            let edge = edges.entry(block).or_insert_with(|| EdgeBlock {
                data: AlignedBuffer::zeroed(BLOCK),
                filled: 0,
            });
            edge.data[within..within + data.len()].copy_from_slice(data);
            edge.filled += data.len();
            assert!(
                edge.filled <= BLOCK,
                "block {block} of {} was written more than once",
                self.file.path().display()
            );
            if edge.filled == BLOCK {
                edges.remove(&block)
            } else {
                None
            }
        };
        match full {
            Some(edge) => self.file.write_at(&edge.data, block * DIRECT_IO_ALIGNMENT_BYTES),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::fs::{Fs, OpenOptions, SimFs};

    fn direct_file(fs: &SimFs) -> Arc<dyn FsFile> {
        fs.create_dir_all(Path::new("/d")).unwrap();
        Arc::from(
            fs.open(Path::new("/d/f"), OpenOptions::create_new().with_direct(true))
                .unwrap(),
        )
    }

    fn contents(fs: &SimFs) -> Vec<u8> {
        let file = fs.open_read(Path::new("/d/f")).unwrap();
        let mut data = vec![0u8; file.len().unwrap() as usize];
        file.read_exact_at(&mut data, 0).unwrap();
        data
    }

    /// `data` cut into pieces of the given sizes, written in a scrambled
    /// order, each from a buffer placed as [`start_for_offset`] says (or
    /// deliberately misplaced).
    fn write_scrambled(writer: &DirectWriter, data: &[u8], sizes: &[usize], misplace: bool) {
        let mut pieces = Vec::new();
        let mut offset = 0;
        for &size in sizes.iter().cycle() {
            if offset >= data.len() {
                break;
            }
            let end = (offset + size).min(data.len());
            pieces.push(offset..end);
            offset = end;
        }
        // A fixed permutation: odd pieces first, then even ones backwards.
        let order: Vec<_> = (1..pieces.len())
            .step_by(2)
            .chain((0..pieces.len()).step_by(2).rev())
            .collect();
        for index in order {
            let range = pieces[index].clone();
            let mut buffer: Vec<u8> = Vec::with_capacity(range.len() + 2 * BLOCK);
            let mut start = start_for_offset(buffer.as_ptr() as usize, range.start as u64);
            if misplace {
                start = (start + 100) % BLOCK;
            }
            buffer.resize(start, 0);
            buffer.extend_from_slice(&data[range.clone()]);
            writer.write_at(&buffer[start..], range.start as u64).unwrap();
        }
    }

    #[test]
    fn pieces_in_any_order_make_the_file() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        for sizes in [&[100usize][..], &[4096], &[102_400], &[300, 8192, 4000, 5]] {
            for misplace in [false, true] {
                let fs = SimFs::new();
                let writer = DirectWriter::new(direct_file(&fs));
                write_scrambled(&writer, &data, sizes, misplace);
                writer.finish(data.len() as u64).unwrap();
                assert_eq!(contents(&fs), data, "pieces {sizes:?}, misplaced {misplace}");
            }
        }
    }

    #[test]
    fn empty_and_tiny_files() {
        let fs = SimFs::new();
        let writer = DirectWriter::new(direct_file(&fs));
        writer.finish(0).unwrap();
        assert!(contents(&fs).is_empty());

        let fs = SimFs::new();
        let writer = DirectWriter::new(direct_file(&fs));
        writer.write_at(b"abc", 0).unwrap();
        writer.finish(3).unwrap();
        assert_eq!(contents(&fs), b"abc");
    }

    #[test]
    fn a_missing_piece_is_reported_at_finish() {
        let fs = SimFs::new();
        let writer = DirectWriter::new(direct_file(&fs));
        writer.write_at(&[1u8; 100], 0).unwrap();
        writer.write_at(&[2u8; 100], 200).unwrap();
        let error = writer.finish(300).unwrap_err();
        assert!(
            error.to_string().contains("block at offset 0 holds 200 bytes"),
            "{error}"
        );
    }

    #[test]
    fn start_for_offset_agrees_with_the_offset() {
        for address in [0usize, 1, 4095, 4096, 12_345] {
            for offset in [0u64, 100, 4096, 409_700] {
                let start = start_for_offset(address, offset);
                assert!(start < BLOCK);
                assert_eq!((address + start) % BLOCK, (offset % 4096) as usize);
            }
        }
    }
}
