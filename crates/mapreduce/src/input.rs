//! Input files: their formats, their division into blocks, and the records
//! of a block.
//!
//! Phase one (and phase zero's sample) reads each input once, one block at
//! a time. A block is a byte range of one file; it owns the records that
//! *start* inside it, so blocks are cut at fixed offsets without reading
//! the data, and a reader extends a block past its end to finish its last
//! record (text) or rounds the offsets to whole records (gensort). A
//! block's identity, (file index, offset), is the provenance of every
//! record it produces: the recovery of lost partitions and the duplicate
//! check of phase two rest on it (see the crate's DESIGN.md).

use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use spillway_core::{bail, ensure, gensort, Fs, FsFile, Result};

use crate::chunk::{self, ChunkHeader, CHUNK_HEADER_BYTES};
use crate::scan::find_byte;

/// How an input file's bytes become records for `map`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum InputFormat {
    /// Lines ending in `\n` (a `\r` before it is dropped): the key is empty,
    /// the value the line.
    Text,
    /// Lines split at the first `separator` byte: the key is the field
    /// before it, the value the rest of the line (a line without one is all
    /// key).
    Delimited {
        /// The byte between key and value (`\t` for TSV).
        separator: u8,
    },
    /// gensort binary records: a 10-byte key and a 90-byte value.
    Gensort,
    /// A binary key/value file written by a job ([`crate::OutputFormat::Binary`]).
    KeyValue,
}

impl InputFormat {
    /// The format named `name` (`text`, `tsv`, `csv`, `gensort`, `kv`).
    pub fn parse(name: &str) -> Result<Self> {
        Ok(match name {
            "text" => InputFormat::Text,
            "tsv" => InputFormat::Delimited { separator: b'\t' },
            "csv" => InputFormat::Delimited { separator: b',' },
            "gensort" => InputFormat::Gensort,
            "kv" => InputFormat::KeyValue,
            _ => bail!(
                InvalidArgument,
                "unknown input format '{name}'; the formats are text, tsv, csv, gensort and kv"
            ),
        })
    }

    /// The name [`parse`](Self::parse) takes (`tsv` and `csv` for those
    /// separators, `delimited` for another).
    pub fn name(self) -> &'static str {
        match self {
            InputFormat::Text => "text",
            InputFormat::Delimited { separator: b'\t' } => "tsv",
            InputFormat::Delimited { separator: b',' } => "csv",
            InputFormat::Delimited { .. } => "delimited",
            InputFormat::Gensort => "gensort",
            InputFormat::KeyValue => "kv",
        }
    }

    fn is_lines(self) -> bool {
        matches!(self, InputFormat::Text | InputFormat::Delimited { .. })
    }
}

/// One block of one input: the unit phase one reads, maps and tracks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Block {
    /// Index of the file among the job's inputs.
    pub file: u32,
    /// First byte of the block (for key/value files, of its chunk).
    pub offset: u64,
    /// Bytes the block covers.
    pub len: u64,
}

/// The job's input files, opened, with their sizes.
#[derive(Debug)]
pub struct Inputs {
    format: InputFormat,
    files: Vec<(PathBuf, Box<dyn FsFile>, u64)>,
    /// For a block stored as a file of its own: the file index and offset
    /// its records report (see [`placed`](Self::placed)).
    origin: Option<(u32, u64)>,
}

impl Inputs {
    /// Opens every input, checking what can be checked without reading the
    /// data: a gensort input holds whole records, a key/value input starts
    /// with a chunk.
    pub fn open(fs: &dyn Fs, paths: &[PathBuf], format: InputFormat) -> Result<Self> {
        ensure!(
            !paths.is_empty(),
            InvalidArgument,
            "a job needs at least one input file"
        );
        ensure!(
            paths.len() <= u32::MAX as usize,
            InvalidArgument,
            "{} input files are more than a job takes",
            paths.len()
        );
        let mut files = Vec::with_capacity(paths.len());
        for path in paths {
            ensure!(
                !fs.is_dir(path)?,
                InvalidArgument,
                "the input {} is a directory, not a file",
                path.display()
            );
            let file = fs.open_read(path)?;
            let len = file.len()?;
            if format == InputFormat::Gensort {
                ensure!(
                    len.is_multiple_of(gensort::RECORD_BYTES as u64),
                    InvalidArgument,
                    "{}: {len} bytes is not a whole number of {}-byte gensort records",
                    path.display(),
                    gensort::RECORD_BYTES
                );
            }
            files.push((path.clone(), file, len));
        }
        Ok(Inputs {
            format,
            files,
            origin: None,
        })
    }

    /// These inputs, one file that is a block cut from input `file` of a
    /// larger job at `offset`: its records report that file and their
    /// offsets in it, as they would had the whole file been read (a grep's
    /// keys, error messages).
    pub fn placed(mut self, file: u32, offset: u64) -> Result<Self> {
        ensure!(
            self.files.len() == 1,
            InvalidArgument,
            "only a single block file can be placed in a larger input, not {} files",
            self.files.len()
        );
        self.origin = Some((file, offset));
        Ok(self)
    }

    /// The file index and the offset to add that records of input `file`
    /// report: its own index and 0, unless [`placed`](Self::placed).
    pub fn origin(&self, file: u32) -> (u32, u64) {
        self.origin.unwrap_or((file, 0))
    }

    /// The format every input is read as.
    pub fn format(&self) -> InputFormat {
        self.format
    }

    /// Bytes of every input together.
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|(_, _, len)| len).sum()
    }

    /// The inputs' paths, in order (a block's `file` indexes this).
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.files.iter().map(|(path, _, _)| path.as_path())
    }

    /// The inputs' lengths, in order.
    pub fn lengths(&self) -> impl Iterator<Item = u64> + '_ {
        self.files.iter().map(|(_, _, len)| *len)
    }

    /// The path of input `file`.
    pub fn path(&self, file: u32) -> &Path {
        &self.files[file as usize].0
    }

    /// Every input cut into blocks of about `block_bytes` (whole records for
    /// gensort, whole chunks for key/value files), in file and offset order.
    pub fn blocks(&self, block_bytes: u64) -> Result<Vec<Block>> {
        ensure!(
            block_bytes > 0,
            InvalidArgument,
            "the block size must be positive"
        );
        let mut blocks = Vec::new();
        for (index, (path, file, len)) in self.files.iter().enumerate() {
            let file_index = index as u32;
            match self.format {
                InputFormat::KeyValue => {
                    let mut offset = 0;
                    while offset < *len {
                        let header = chunk::read_header(path, &**file, offset, *len)?;
                        let chunk_len = CHUNK_HEADER_BYTES as u64 + u64::from(header.payload_bytes);
                        blocks.push(Block {
                            file: file_index,
                            offset,
                            len: chunk_len,
                        });
                        offset += chunk_len;
                    }
                }
                _ => {
                    let step = match self.format {
                        InputFormat::Gensort => {
                            (block_bytes / gensort::RECORD_BYTES as u64).max(1) * gensort::RECORD_BYTES as u64
                        }
                        _ => block_bytes,
                    };
                    let mut offset = 0;
                    while offset < *len {
                        let block_len = step.min(len - offset);
                        blocks.push(Block {
                            file: file_index,
                            offset,
                            len: block_len,
                        });
                        offset += block_len;
                    }
                }
            }
        }
        Ok(blocks)
    }

    /// Every input cut into blocks of about `block_bytes` that each hold
    /// whole records, so that each can be stored and read as a file of its
    /// own (the cluster's file system): a block of lines starts where a
    /// line starts and ends where one ends (a line longer than
    /// `block_bytes` makes a longer block); gensort and key/value blocks
    /// are those of [`blocks`](Self::blocks), already whole.
    pub fn whole_record_blocks(&self, block_bytes: u64) -> Result<Vec<Block>> {
        let blocks = self.blocks(block_bytes)?;
        if !self.format.is_lines() {
            return Ok(blocks);
        }
        let mut whole = Vec::with_capacity(blocks.len());
        let mut piece = Vec::new();
        let mut start = 0;
        for (index, block) in blocks.iter().enumerate() {
            if index > 0 && blocks[index - 1].file != block.file {
                start = 0;
            }
            let len = self.files[block.file as usize].2;
            let end = match blocks.get(index + 1) {
                // Inside a line already found to run past the next cut.
                Some(next) if next.file == block.file && next.offset <= start => continue,
                Some(next) if next.file == block.file => {
                    self.line_start(next.file, next.offset, &mut piece)?
                }
                _ => len,
            };
            if end > start {
                whole.push(Block {
                    file: block.file,
                    offset: start,
                    len: end - start,
                });
                start = end;
            }
        }
        Ok(whole)
    }

    /// The first offset at or after `offset` (> 0) where a line of `file`
    /// starts, or its length when none does: `piece` holds what is read.
    fn line_start(&self, file: u32, offset: u64, piece: &mut Vec<u8>) -> Result<u64> {
        let (_, handle, len) = &self.files[file as usize];
        // The byte before `offset`: a newline there starts a line at `offset`.
        let mut at = offset - 1;
        while at < *len {
            let size = (64u64 << 10).min(len - at);
            piece.clear();
            handle.read_exact_append(piece, size as usize, at)?;
            if let Some(newline) = find_byte(b'\n', piece) {
                return Ok(at + newline as u64 + 1);
            }
            at += size;
        }
        Ok(*len)
    }

    /// Reads `block` into `data` (cleared first) and returns the range of
    /// `data` holding the block's records and the file offset of its first
    /// byte: for lines, from the first line that starts in the block to the
    /// end of the last one (read past the block's end as far as it runs, up
    /// to `record_bytes_max`).
    pub fn read_block(
        &self,
        block: Block,
        data: &mut Vec<u8>,
        record_bytes_max: usize,
    ) -> Result<(Range<usize>, u64)> {
        let (path, file, file_len) = &self.files[block.file as usize];
        data.clear();
        if !self.format.is_lines() {
            file.read_exact_append(data, block.len as usize, block.offset)?;
            return Ok((0..data.len(), block.offset));
        }
        // One byte before the block says whether its first line starts at
        // its first byte.
        let before = u64::from(block.offset > 0);
        let start_at = block.offset - before;
        file.read_exact_append(data, (block.len + before) as usize, start_at)?;
        let mut start = before as usize;
        if before == 1 && data[0] != b'\n' {
            start = match find_byte(b'\n', &data[1..]) {
                Some(newline) => newline + 2,
                // No line starts in this block.
                None => return Ok((data.len()..data.len(), block.offset + block.len)),
            };
        }
        // Finish the last line, reading on in pieces.
        let last_line = data[start..]
            .iter()
            .rposition(|&byte| byte == b'\n')
            .map_or(start, |at| start + at + 1);
        let mut end_at = start_at + data.len() as u64;
        while end_at < *file_len && !data.ends_with(b"\n") {
            let searched = data.len();
            let piece = (64u64 << 10).min(file_len - end_at) as usize;
            file.read_exact_append(data, piece, end_at)?;
            end_at += piece as u64;
            if let Some(newline) = find_byte(b'\n', &data[searched..]) {
                data.truncate(searched + newline + 1);
            }
            ensure!(
                data.len() - last_line <= record_bytes_max.saturating_add(1),
                InvalidArgument,
                "{}: the line at offset {} is longer than {record_bytes_max} bytes, the longest record allowed",
                path.display(),
                start_at + last_line as u64
            );
        }
        Ok((start..data.len(), start_at + start as u64))
    }

    /// Calls `visit` with every record of a block read by
    /// [`read_block`](Self::read_block) (`records` starting at file offset
    /// `first_offset`): its key, its value and its offset in the file.
    pub fn for_each_record(
        &self,
        block: Block,
        records: &[u8],
        first_offset: u64,
        mut visit: impl FnMut(&[u8], &[u8], u64) -> Result<()>,
    ) -> Result<()> {
        let path = self.path(block.file);
        match self.format {
            InputFormat::Text | InputFormat::Delimited { .. } => {
                let mut at = 0;
                while at < records.len() {
                    let end = find_byte(b'\n', &records[at..]).map_or(records.len(), |newline| at + newline);
                    let mut line = &records[at..end];
                    if let [rest @ .., b'\r'] = line {
                        line = rest;
                    }
                    let (key, value) = match self.format {
                        InputFormat::Delimited { separator } => match find_byte(separator, line) {
                            Some(cut) => (&line[..cut], &line[cut + 1..]),
                            None => (line, &line[line.len()..]),
                        },
                        _ => (&line[..0], line),
                    };
                    visit(key, value, first_offset + at as u64)?;
                    at = end + 1;
                }
                Ok(())
            }
            InputFormat::Gensort => {
                for (index, record) in records.chunks_exact(gensort::RECORD_BYTES).enumerate() {
                    let (key, value) = record.split_at(gensort::KEY_BYTES);
                    visit(key, value, block.offset + (index * gensort::RECORD_BYTES) as u64)?;
                }
                Ok(())
            }
            InputFormat::KeyValue => {
                let header = ChunkHeader::decode(path, block.offset, records)?;
                let payload = header.checked_payload(path, block.offset, records)?;
                for pair in crate::record::Pairs::new(payload) {
                    let pair = pair.map_err(|error| error.at(path, block.offset))?;
                    visit(
                        pair.key,
                        pair.value,
                        block.offset + (CHUNK_HEADER_BYTES + pair.at) as u64,
                    )?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_core::SimFs;

    fn inputs(format: InputFormat, files: &[&[u8]]) -> Inputs {
        let fs = SimFs::new();
        let mut paths = Vec::new();
        for (index, bytes) in files.iter().enumerate() {
            let path = PathBuf::from(format!("/in/{index}"));
            fs.create_dir_all(Path::new("/in")).unwrap();
            fs.create(&path).unwrap().write_at(bytes, 0).unwrap();
            paths.push(path);
        }
        Inputs::open(&fs, &paths, format).unwrap()
    }

    fn cut(inputs: &Inputs, block_bytes: u64) -> Vec<(u32, u64, u64)> {
        let blocks = inputs.whole_record_blocks(block_bytes).unwrap();
        blocks
            .iter()
            .map(|block| (block.file, block.offset, block.len))
            .collect()
    }

    #[test]
    fn whole_record_blocks_of_lines_start_and_end_at_line_boundaries() {
        let text: &[u8] = b"ab\ncd\nefghijklmnop\nq\nrs";
        let lines = inputs(InputFormat::Text, &[text, b"x\n", b"", b"no newline"]);
        // Nominal cuts at 4, 8, 12, ... move to the line starts after them;
        // the long line makes one block; the last line has no newline.
        assert_eq!(
            cut(&lines, 4),
            [
                (0, 0, 6),
                (0, 6, 13),
                (0, 19, 2),
                (0, 21, 2),
                (1, 0, 2),
                (3, 0, 10)
            ]
        );
        // A cut that falls on a line start stays there.
        assert_eq!(
            cut(&lines, 3),
            [
                (0, 0, 3),
                (0, 3, 3),
                (0, 6, 13),
                (0, 19, 2),
                (0, 21, 2),
                (1, 0, 2),
                (3, 0, 10)
            ]
        );
        // Every byte is in exactly one block, in order.
        for block_bytes in 1..30 {
            let blocks = cut(&lines, block_bytes);
            let covered: u64 = blocks
                .iter()
                .filter(|block| block.0 == 0)
                .map(|block| block.2)
                .sum();
            assert_eq!(covered, text.len() as u64, "{block_bytes}");
            for pair in blocks.windows(2).filter(|pair| pair[0].0 == pair[1].0) {
                assert_eq!(pair[0].1 + pair[0].2, pair[1].1);
                assert_eq!(text[pair[1].1 as usize - 1], b'\n', "{block_bytes}: {pair:?}");
            }
        }
    }

    #[test]
    fn whole_record_blocks_of_gensort_records_are_whole_records() {
        let records = vec![7u8; 250 * gensort::RECORD_BYTES];
        let gensort = inputs(InputFormat::Gensort, &[&records]);
        // 1,050 bytes a block: ten whole records each.
        let blocks = cut(&gensort, 1_050);
        assert_eq!(blocks.len(), 25);
        assert!(blocks.iter().all(|block| block.2 == 1_000));
    }
}
