//! Writing a list file: blocks of records in (hash, key) order, then
//! the filter, index and sketch sections and the footer, directly where
//! the file system allows it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use spillway_core::fs::{create_or_truncate_preferring_direct, AlignedBuffer};
use spillway_core::{bail, block_crc, Fs, FsFile, Hash64, Result};

use super::file::BlockPages;
use super::{
    file_name, FileNumber, Footer, ListFile, ListMeta, ALIGNMENT, BLOCK_HEADER_BYTES, BLOCK_TRAILER_BYTES,
    CONTINUES, FOOTER_BYTES, WRITE_CHUNK_BYTES,
};
use crate::bloom::{Bloom, FilterBits};
use crate::kmv::{Sketch, SKETCH_ENTRIES};
use crate::record::{self, RecordRef};

/// Writes one list file, records in (hash, key) order.
///
/// The file is written with direct I/O where the file system allows it.
/// Spills and splits write every record again and again; through the page
/// cache each byte costs a copy into the cache, its pages' allocation and
/// later their writeback, which at small records took a sixth of the
/// background worker's time. Direct writes go from an aligned buffer
/// of the writer's straight to the device. (GETs still read through the
/// page cache: a direct write drops the cached pages it overwrites.)
#[derive(Debug)]
pub struct ListWriter {
    pub(super) file: Box<dyn FsFile>,
    /// Where whole aligned pieces of `out` are copied to be written
    /// directly; `None` where the file system refused direct I/O.
    pub(super) direct: Option<AlignedBuffer>,
    pub(super) path: PathBuf,
    pub(super) number: FileNumber,
    pub(super) block_bytes: usize,
    pub(super) filter_bits: FilterBits,
    /// Bytes not yet written; they start at file offset `flushed`.
    pub(super) out: Vec<u8>,
    pub(super) flushed: u64,
    /// Where the open block starts in `out`, if one is open.
    pub(super) block_start: Option<usize>,
    pub(super) first_hashes: Vec<Hash64>,
    pub(super) pages: Vec<u32>,
    /// Every record's hash, for the filter and the sketch.
    pub(super) hashes: Vec<Hash64>,
    pub(super) meta: ListMeta,
}

impl ListWriter {
    /// Creates list `number` in `dir`, its footer recording `meta`.
    pub fn create(
        fs: &dyn Fs,
        dir: &Path,
        number: FileNumber,
        block_bytes: u32,
        filter_bits: FilterBits,
        meta: ListMeta,
    ) -> Result<Self> {
        Self::create_at(
            fs,
            &dir.join(file_name(number)),
            number,
            block_bytes,
            filter_bits,
            meta,
        )
    }

    /// Creates list `number` at `path` (a name it is renamed from later:
    /// repair's salvaged copies).
    pub fn create_at(
        fs: &dyn Fs,
        path: &Path,
        number: FileNumber,
        block_bytes: u32,
        filter_bits: FilterBits,
        meta: ListMeta,
    ) -> Result<Self> {
        debug_assert!(meta.seq_min <= meta.seq_max && meta.cover_low <= meta.cover_high);
        let path = path.to_path_buf();
        let (file, direct) = create_or_truncate_preferring_direct(fs, &path)?;
        let staging = (WRITE_CHUNK_BYTES + block_bytes as usize).next_multiple_of(ALIGNMENT);
        let direct = direct.then(|| AlignedBuffer::zeroed(staging));
        Ok(ListWriter {
            file,
            direct,
            path,
            number,
            block_bytes: block_bytes as usize,
            filter_bits,
            out: Vec::with_capacity(WRITE_CHUNK_BYTES + block_bytes as usize),
            flushed: 0,
            block_start: None,
            first_hashes: Vec::new(),
            pages: Vec::new(),
            hashes: Vec::new(),
            meta,
        })
    }

    /// Bytes written so far (blocks only).
    pub fn bytes(&self) -> u64 {
        self.flushed + self.out.len() as u64
    }

    /// Appends `record`, which must follow the previous one in (hash, key)
    /// order (checked in debug builds by the callers' interleavings).
    pub fn add(&mut self, record: &RecordRef<'_>) -> Result<()> {
        let len = record.encoded_len();
        if let Some(start) = self.block_start {
            if self.out.len() - start + len + BLOCK_TRAILER_BYTES > self.block_bytes {
                self.finish_block()?;
            }
        }
        if self.block_start.is_none() {
            let offset = self.bytes();
            debug_assert_eq!(offset % self.block_bytes as u64, 0);
            let page = offset / self.block_bytes as u64;
            let page = u32::try_from(page).ok().filter(|page| page & CONTINUES == 0);
            let Some(mut page) = page else {
                bail!(
                    ResourcesExhausted,
                    "list {} passed 2^31 blocks",
                    self.path.display()
                );
            };
            if self.hashes.last() == Some(&record.hash) {
                page |= CONTINUES;
            }
            self.first_hashes.push(record.hash);
            self.pages.push(page);
            self.block_start = Some(self.out.len());
            self.out.extend_from_slice(&[0; BLOCK_HEADER_BYTES]);
        }
        record::encode(record, &mut self.out);
        self.hashes.push(record.hash);
        let start = self.block_start.expect("a block is open");
        if self.out.len() - start + BLOCK_TRAILER_BYTES > self.block_bytes {
            // A record longer than a block: its block holds it alone.
            self.finish_block()?;
        }
        Ok(())
    }

    pub(super) fn finish_block(&mut self) -> Result<()> {
        let Some(start) = self.block_start.take() else {
            return Ok(());
        };
        let payload_len = (self.out.len() - start - BLOCK_HEADER_BYTES) as u32;
        self.out[start..start + 4].copy_from_slice(&payload_len.to_le_bytes());
        let offset = self.flushed + start as u64;
        let crc = block_crc(self.number, offset, &self.out[start..]);
        self.out.extend_from_slice(&crc.to_le_bytes());
        let block_len = (self.out.len() - start).next_multiple_of(self.block_bytes);
        self.out.resize(start + block_len, 0);
        if self.out.len() >= WRITE_CHUNK_BYTES {
            self.write_out(false)?;
        }
        Ok(())
    }

    /// Writes `out` at `flushed` and empties it; a direct writer keeps
    /// back the part past the last aligned offset unless this is the
    /// `last` write, which it pads with zeros (cut off by the caller).
    pub(super) fn write_out(&mut self, last: bool) -> Result<()> {
        let Some(staging) = self.direct.as_mut() else {
            self.file.write_at(&self.out, self.flushed)?;
            if !last {
                // Start writing it out now: the disk works while we compute,
                // and the log's syncs do not find megabytes of a list's
                // pages waiting in front of them (ext4 commits them together).
                self.file.start_writeback()?;
            }
            self.flushed += self.out.len() as u64;
            self.out.clear();
            return Ok(());
        };
        debug_assert_eq!(self.flushed % ALIGNMENT as u64, 0);
        let mut done = 0;
        while done < self.out.len() {
            let left = &self.out[done..];
            let data = if last {
                left.len().min(staging.len())
            } else {
                (left.len() / ALIGNMENT * ALIGNMENT).min(staging.len())
            };
            if data == 0 {
                break;
            }
            let padded = data.next_multiple_of(ALIGNMENT);
            staging[..data].copy_from_slice(&left[..data]);
            staging[data..padded].fill(0);
            self.file.write_at(&staging[..padded], self.flushed)?;
            self.flushed += data as u64;
            done += data;
        }
        self.out.drain(..done);
        Ok(())
    }

    /// Writes the sections and the footer and syncs the file; returns the
    /// list as readers see it. The caller syncs the directory.
    pub fn finish(mut self) -> Result<Arc<ListFile>> {
        self.finish_block()?;
        ensure_records(&self)?;
        let filter_offset = self.bytes();
        let sketch = Sketch::build(&self.hashes, SKETCH_ENTRIES);
        // The first-hash index, its page entries (a bit each, as a rule)
        // and the sketch stay in memory beside the filter.
        let blocks = self.first_hashes.len() as u64;
        let other_bits = blocks * (Hash64::BITS as u64 + 1) + sketch.memory_bytes() as u64 * 8;
        let filter_bits = self.filter_bits.for_list(self.hashes.len() as u64, other_bits);
        let bloom = Bloom::build(&self.hashes, filter_bits);
        let start = self.out.len();
        bloom.encode(&mut self.out);
        seal_section(self.number, self.flushed, start, &mut self.out);
        let index_offset = self.bytes();
        let start = self.out.len();
        for (hash, page) in self.first_hashes.iter().zip(&self.pages) {
            self.out.extend_from_slice(&hash.to_le_bytes());
            self.out.extend_from_slice(&page.to_le_bytes());
        }
        seal_section(self.number, self.flushed, start, &mut self.out);
        let sketch_offset = self.bytes();
        let start = self.out.len();
        sketch.encode(&mut self.out);
        seal_section(self.number, self.flushed, start, &mut self.out);
        let footer = Footer {
            block_bytes: self.block_bytes as u32,
            records: self.hashes.len() as u64,
            blocks: self.first_hashes.len() as u32,
            index_offset,
            sketch_offset,
            filter_offset,
            lowest_hash: self.hashes[0],
            highest_hash: *self.hashes.last().expect("a list has records"),
            meta: self.meta,
        };
        let footer_offset = self.bytes();
        footer.encode(self.number, footer_offset, &mut self.out);
        let file_bytes = footer_offset + FOOTER_BYTES as u64;
        self.write_out(true)?;
        if self.direct.is_some() {
            // The last direct write was padded to a whole page.
            self.file.set_len(file_bytes)?;
        }
        self.file.sync_data()?;
        // The index lives as long as the file: no spare capacity.
        self.first_hashes.shrink_to_fit();
        Ok(Arc::new(ListFile {
            number: self.number,
            path: self.path,
            footer,
            file_bytes,
            first_hashes: self.first_hashes,
            pages: BlockPages::new(self.pages),
            false_positive_rate: bloom.false_positive_rate(footer.records),
            bloom,
            sketch,
            damage: None,
        }))
    }
}

pub(super) fn ensure_records(writer: &ListWriter) -> Result<()> {
    if writer.hashes.is_empty() {
        bail!(
            Internal,
            "list {} finished with no records",
            writer.path.display()
        );
    }
    Ok(())
}

/// Appends the checksum of `out[start..]`, which will sit at file offset
/// `flushed + start`.
pub(super) fn seal_section(number: FileNumber, flushed: u64, start: usize, out: &mut Vec<u8>) {
    let crc = block_crc(number, flushed + start as u64, &out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
}
