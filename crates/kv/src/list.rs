//! List files: a non-root node's hash-sorted lists (seed 001 §3.1), one
//! file per list, with the indexes a GET needs written into the file so
//! that opening a store reads them, never the records.
//!
//! ```text
//! file    = block* | filter section | index section | sketch section | footer
//! block   = payload length u32 LE | records | crc u32 LE | zeros to a multiple of block_bytes
//!           crc = block_crc(file number, block offset, payload length ‖ records)
//! section = bytes | block_crc(file number, section offset, bytes) u32 LE
//!   filter: the Bloom filter (bloom.rs)
//!   index:  per block: first hash u64 LE | first page u32 LE (bit 31: the block starts
//!           with the hash the previous block ends with)
//!   sketch: the KMV sketch (kmv.rs)
//! footer  = magic "SPWLIST1" | version u32 (2) | block_bytes u32 | records u64 | blocks u32 |
//!           index offset u64 | sketch offset u64 | filter offset u64 (= end of the blocks) |
//!           lowest hash u64 | highest hash u64 | store id u64 | first write u64 | last write u64 |
//!           cover low u64 | cover high u64 | crc u32 (block_crc(file number, footer offset, ...))
//! ```
//!
//! The footer's [`ListMeta`] says where the records came from: the store
//! (its random identity), the sequence numbers of the writes they hold
//! (a root spill's lists take the frozen root's; a rewrite's, the union of
//! its inputs') and the hashes the list was written for (the child or
//! node it was written into). Repair orders lists by them when the
//! manifest cannot be trusted (repair.rs).
//!
//! Records are sorted by (hash, key), at most one per key. A block holds
//! whole records; a record longer than a block gets a block of its own,
//! as many pages long as it needs. The first-hash index (seed 001 §3.4.2)
//! finds the one block that can hold a hash; the flag marks blocks that
//! continue a run of equal hashes (colliding keys), so a lookup knows to
//! start one block earlier.
//!
//! A node refers to a list through a [`ListRef`]: a file, a run of its
//! blocks and a hash range. A fast split gives two leaves refs to the same
//! file with disjoint ranges; the blocks at the cut are shared and readers
//! skip the records outside their range.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use spillway_core::fs::{create_or_truncate_preferring_direct, AlignedBuffer, DIRECT_IO_ALIGNMENT_BYTES};
use spillway_core::{bail, block_crc, Error, Fs, FsFile, Hash64, Result};

use crate::bloom::{Bloom, FilterBits};
use crate::cache::FileCache;
use crate::collapse::Source;
use crate::kmv::{Sketch, SKETCH_ENTRIES};
use crate::record::{self, Kind, RecordRef, RecordSpan};

/// A list file's number (its name; mixed into its checksums).
pub type FileNumber = u64;

const MAGIC: &[u8; 8] = b"SPWLIST1";
const VERSION: u32 = 2;
/// Bytes of the footer at the end of every list file.
pub const FOOTER_BYTES: usize = 112;
/// Bytes of the footer of version 1 (without [`ListMeta`]), told apart
/// to name the format in the error.
const FOOTER_V1_BYTES: usize = 72;
const BLOCK_HEADER_BYTES: usize = 4;
const BLOCK_TRAILER_BYTES: usize = 4;
const INDEX_ENTRY_BYTES: usize = 12;
/// Bit 31 of an index entry's page: the block continues a run of equal hashes.
const CONTINUES: u32 = 1 << 31;
/// Bytes a writer gathers before it writes them.
const WRITE_CHUNK_BYTES: usize = 1 << 20;
/// What direct writes align their offsets and lengths to.
const ALIGNMENT: usize = DIRECT_IO_ALIGNMENT_BYTES as usize;
/// Bytes a cursor reads at once.
const READ_CHUNK_BYTES: usize = 256 << 10;

/// The file name of list `number`.
pub fn file_name(number: FileNumber) -> String {
    format!("{number:06}.list")
}

/// The number a list file name stands for.
pub fn parse_name(name: &str) -> Option<FileNumber> {
    let digits = name.strip_suffix(".list")?;
    (!digits.is_empty() && digits.bytes().all(|byte| byte.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Where a list's records came from, as its footer records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ListMeta {
    /// The identity of the store that wrote it.
    pub store_id: u64,
    /// The lowest sequence number of the writes its records may hold.
    pub seq_min: u64,
    /// The highest sequence number of the writes its records may hold.
    pub seq_max: u64,
    /// The lowest hash it was written for: its records are all of the
    /// writes `seq_min..=seq_max` in `cover_low..=cover_high` (collapsed;
    /// tombstones dropped if written at a leaf).
    pub cover_low: Hash64,
    /// The highest hash it was written for.
    pub cover_high: Hash64,
}

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
    file: Box<dyn FsFile>,
    /// Where whole aligned pieces of `out` are copied to be written
    /// directly; `None` where the file system refused direct I/O.
    direct: Option<AlignedBuffer>,
    path: PathBuf,
    number: FileNumber,
    block_bytes: usize,
    filter_bits: FilterBits,
    /// Bytes not yet written; they start at file offset `flushed`.
    out: Vec<u8>,
    flushed: u64,
    /// Where the open block starts in `out`, if one is open.
    block_start: Option<usize>,
    first_hashes: Vec<Hash64>,
    pages: Vec<u32>,
    /// Every record's hash, for the filter and the sketch.
    hashes: Vec<Hash64>,
    meta: ListMeta,
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

    fn finish_block(&mut self) -> Result<()> {
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
    fn write_out(&mut self, last: bool) -> Result<()> {
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

fn ensure_records(writer: &ListWriter) -> Result<()> {
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
fn seal_section(number: FileNumber, flushed: u64, start: usize, out: &mut Vec<u8>) {
    let crc = block_crc(number, flushed + start as u64, &out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Footer {
    block_bytes: u32,
    records: u64,
    blocks: u32,
    index_offset: u64,
    sketch_offset: u64,
    filter_offset: u64,
    lowest_hash: Hash64,
    highest_hash: Hash64,
    meta: ListMeta,
}

impl Footer {
    fn encode(&self, number: FileNumber, offset: u64, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&self.block_bytes.to_le_bytes());
        out.extend_from_slice(&self.records.to_le_bytes());
        out.extend_from_slice(&self.blocks.to_le_bytes());
        let meta = &self.meta;
        for field in [
            self.index_offset,
            self.sketch_offset,
            self.filter_offset,
            self.lowest_hash,
            self.highest_hash,
            meta.store_id,
            meta.seq_min,
            meta.seq_max,
            meta.cover_low,
            meta.cover_high,
        ] {
            out.extend_from_slice(&field.to_le_bytes());
        }
        let crc = block_crc(number, offset, &out[start..]);
        out.extend_from_slice(&crc.to_le_bytes());
        debug_assert_eq!(out.len() - start, FOOTER_BYTES);
    }

    fn decode(path: &Path, number: FileNumber, offset: u64, bytes: &[u8]) -> Result<Footer> {
        let corrupt = |what: String| Error::corruption(path, offset, format!("list footer: {what}"));
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let v1 = bytes.len().checked_sub(FOOTER_V1_BYTES).map(|at| &bytes[at..]);
        if v1.is_some_and(|v1| &v1[..8] == MAGIC && v1[8..12] == 1u32.to_le_bytes()) {
            return Err(corrupt(
                "a list file of format version 1, written by an older Spillway: this build reads version 2 \
                 (stores with store identities and log chains); load the data into a new store"
                    .into(),
            ));
        }
        if bytes.len() != FOOTER_BYTES || &bytes[..8] != MAGIC {
            return Err(corrupt("not a list file (bad magic)".into()));
        }
        if block_crc(number, offset, &bytes[..FOOTER_BYTES - 4]) != u32_at(FOOTER_BYTES - 4) {
            return Err(corrupt("checksum mismatch".into()));
        }
        let version = u32_at(8);
        if version != VERSION {
            return Err(corrupt(format!("version {version}, this build reads {VERSION}")));
        }
        let footer = Footer {
            block_bytes: u32_at(12),
            records: u64_at(16),
            blocks: u32_at(24),
            index_offset: u64_at(28),
            sketch_offset: u64_at(36),
            filter_offset: u64_at(44),
            lowest_hash: u64_at(52),
            highest_hash: u64_at(60),
            meta: ListMeta {
                store_id: u64_at(68),
                seq_min: u64_at(76),
                seq_max: u64_at(84),
                cover_low: u64_at(92),
                cover_high: u64_at(100),
            },
        };
        let block_bytes = u64::from(footer.block_bytes);
        let sections_in_order = footer.filter_offset <= footer.index_offset
            && footer.index_offset <= footer.sketch_offset
            && footer.sketch_offset <= offset;
        if !block_bytes.is_power_of_two()
            || block_bytes < 512
            || !sections_in_order
            || !footer.filter_offset.is_multiple_of(block_bytes)
            || footer.blocks == 0
            || footer.records < u64::from(footer.blocks)
            || footer.sketch_offset - footer.index_offset
                != footer.blocks as u64 * INDEX_ENTRY_BYTES as u64 + 4
            || footer.lowest_hash > footer.highest_hash
            || footer.meta.seq_min > footer.meta.seq_max
            || footer.meta.cover_low > footer.lowest_hash
            || footer.meta.cover_high < footer.highest_hash
        {
            return Err(corrupt(format!("inconsistent fields {footer:?}")));
        }
        Ok(footer)
    }
}

/// An open list file: its footer and the indexes a GET needs, in memory.
pub struct ListFile {
    number: FileNumber,
    path: PathBuf,
    footer: Footer,
    file_bytes: u64,
    first_hashes: Vec<Hash64>,
    pages: BlockPages,
    bloom: Bloom,
    /// The filter's expected false-positive rate (computed once: a GET
    /// does not need it, the worker sums it over nodes' lists).
    false_positive_rate: f64,
    sketch: Sketch,
    /// For a file a read-only store could not open (missing, or its
    /// footer or sections damaged): what was wrong, returned by every read
    /// that needs it. Such a file has no blocks, filter or index.
    damage: Option<Damage>,
}

/// Why a list file cannot be read, and where.
#[derive(Debug, Clone)]
struct Damage {
    offset: u64,
    what: String,
}

/// Each block's index entry beside its first hash: its first page, with
/// [`CONTINUES`]. Held for the file's life, so held small: when every
/// block is one page (no record outgrew a block, the usual case) block
/// `i` starts at page `i`, and only the continuation bits are kept, 1 bit
/// a block instead of 4 bytes (at 256-byte records, 0.25 bytes per key).
#[derive(Debug)]
enum BlockPages {
    /// Block `i` starts at page `i`; bit `i` set: it has [`CONTINUES`].
    OnePage { blocks: usize, continues: Vec<u64> },
    /// Each block's entry as the file holds it.
    Listed(Vec<u32>),
}

impl BlockPages {
    fn new(mut entries: Vec<u32>) -> Self {
        let one_page = entries
            .iter()
            .enumerate()
            .all(|(i, &entry)| (entry & !CONTINUES) as usize == i);
        if !one_page {
            entries.shrink_to_fit();
            return BlockPages::Listed(entries);
        }
        let mut continues = vec![0u64; entries.len().div_ceil(64)];
        for (i, &entry) in entries.iter().enumerate() {
            if entry & CONTINUES != 0 {
                continues[i / 64] |= 1 << (i % 64);
            }
        }
        BlockPages::OnePage {
            blocks: entries.len(),
            continues,
        }
    }

    fn len(&self) -> usize {
        match self {
            BlockPages::OnePage { blocks, .. } => *blocks,
            BlockPages::Listed(entries) => entries.len(),
        }
    }

    /// Block `block`'s entry: its first page, with [`CONTINUES`].
    fn entry(&self, block: usize) -> u32 {
        match self {
            BlockPages::OnePage { continues, .. } => {
                let flag = if continues[block / 64] >> (block % 64) & 1 != 0 {
                    CONTINUES
                } else {
                    0
                };
                block as u32 | flag
            }
            BlockPages::Listed(entries) => entries[block],
        }
    }

    fn memory_bytes(&self) -> usize {
        match self {
            BlockPages::OnePage { continues, .. } => continues.capacity() * size_of::<u64>(),
            BlockPages::Listed(entries) => entries.capacity() * size_of::<u32>(),
        }
    }
}

impl fmt::Debug for ListFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ListFile")
            .field("number", &self.number)
            .field("records", &self.footer.records)
            .field("blocks", &self.footer.blocks)
            .field("damage", &self.damage)
            .finish()
    }
}

impl ListFile {
    /// Opens list `number` in `dir`: reads its footer and sections (never
    /// its blocks) and checks their checksums.
    pub fn open(fs: &dyn Fs, dir: &Path, number: FileNumber) -> Result<Arc<ListFile>> {
        let path = dir.join(file_name(number));
        let file = fs.open_read(&path)?;
        let file_bytes = file.len()?;
        if file_bytes < FOOTER_BYTES as u64 {
            return Err(Error::corruption(
                &path,
                0,
                format!("list file of {file_bytes} bytes has no footer"),
            ));
        }
        let footer_offset = file_bytes - FOOTER_BYTES as u64;
        let mut bytes = vec![0; FOOTER_BYTES];
        file.read_exact_at(&mut bytes, footer_offset)?;
        let footer = Footer::decode(&path, number, footer_offset, &bytes)?;
        let sections_len = (footer_offset - footer.filter_offset) as usize;
        let mut sections = Vec::with_capacity(sections_len);
        file.read_exact_append(&mut sections, sections_len, footer.filter_offset)?;
        let section = |from: u64, to: u64| -> Result<&[u8]> {
            let start = (from - footer.filter_offset) as usize;
            let end = (to - footer.filter_offset) as usize;
            let corrupt = |what: &str| Error::corruption(&path, from, format!("list section: {what}"));
            if end < start + 4 {
                return Err(corrupt("shorter than its checksum"));
            }
            let (body, crc) = sections[start..end].split_at(end - start - 4);
            if block_crc(number, from, body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
                return Err(corrupt("checksum mismatch"));
            }
            Ok(body)
        };
        let bloom = Bloom::decode(section(footer.filter_offset, footer.index_offset)?)
            .map_err(|error| error.at(&path, footer.filter_offset))?;
        let sketch = Sketch::decode(section(footer.sketch_offset, footer_offset)?)
            .map_err(|error| error.at(&path, footer.sketch_offset))?;
        let index = section(footer.index_offset, footer.sketch_offset)?;
        let mut first_hashes = Vec::with_capacity(footer.blocks as usize);
        let mut pages = Vec::with_capacity(footer.blocks as usize);
        for entry in index.chunks_exact(INDEX_ENTRY_BYTES) {
            first_hashes.push(u64::from_le_bytes(entry[..8].try_into().expect("8 bytes")));
            pages.push(u32::from_le_bytes(entry[8..].try_into().expect("4 bytes")));
        }
        let list = ListFile {
            number,
            path,
            footer,
            file_bytes,
            first_hashes,
            pages: BlockPages::new(pages),
            false_positive_rate: bloom.false_positive_rate(footer.records),
            bloom,
            sketch,
            damage: None,
        };
        list.check_index()?;
        Ok(Arc::new(list))
    }

    /// A stand-in for list `number` in `dir` that could not be opened,
    /// `error` saying why (a `Corruption`, or the I/O error of a missing
    /// file): a read-only store keeps serving the hashes it does not
    /// cover, and every read that needs it fails with a `Corruption`
    /// naming the file.
    pub fn damaged(dir: &Path, number: FileNumber, error: &Error) -> Arc<ListFile> {
        let path = dir.join(file_name(number));
        let (offset, what) = match error {
            Error::Corruption { offset, what, .. } => (*offset, what.clone()),
            other => (0, format!("cannot be read: {other}")),
        };
        Arc::new(ListFile {
            number,
            path,
            footer: Footer {
                block_bytes: 4096,
                records: 0,
                // Any run of blocks a manifest names: the file's own
                // count is unknown.
                blocks: u32::MAX,
                index_offset: 0,
                sketch_offset: 0,
                filter_offset: 0,
                lowest_hash: 0,
                highest_hash: u64::MAX,
                meta: ListMeta::default(),
            },
            file_bytes: 0,
            first_hashes: Vec::new(),
            pages: BlockPages::Listed(Vec::new()),
            false_positive_rate: 1.0,
            bloom: Bloom::build(&[], 0),
            sketch: Sketch::build(&[], SKETCH_ENTRIES),
            damage: Some(Damage { offset, what }),
        })
    }

    /// Whether this is a stand-in for a file that could not be opened.
    pub fn is_damaged(&self) -> bool {
        self.damage.is_some()
    }

    /// The `Corruption` error every read of a damaged stand-in returns.
    pub fn damage_error(&self) -> Option<Error> {
        self.damage
            .as_ref()
            .map(|damage| Error::corruption(&self.path, damage.offset, damage.what.clone()))
    }

    /// Where the records came from: store, writes, hashes.
    pub fn meta(&self) -> ListMeta {
        self.footer.meta
    }

    /// The index must ascend in hashes and pages and stay within the blocks.
    fn check_index(&self) -> Result<()> {
        let pages_end = self.footer.filter_offset / u64::from(self.footer.block_bytes);
        let mut previous: Option<(Hash64, u64)> = None;
        for (i, &hash) in self.first_hashes.iter().enumerate() {
            let page = self.pages.entry(i);
            let first_page = u64::from(page & !CONTINUES);
            let ordered = match previous {
                None => first_page == 0 && page & CONTINUES == 0,
                Some((previous_hash, previous_page)) => {
                    hash >= previous_hash
                        && first_page > previous_page
                        && (page & CONTINUES == 0 || hash == previous_hash)
                }
            };
            if !ordered
                || first_page >= pages_end
                || hash < self.footer.lowest_hash
                || hash > self.footer.highest_hash
            {
                return Err(Error::corruption(
                    &self.path,
                    self.footer.index_offset + (i * INDEX_ENTRY_BYTES) as u64,
                    format!("list index entry {i} (hash {hash:#x}, page {first_page}) out of order or range"),
                ));
            }
            previous = Some((hash, first_page));
        }
        Ok(())
    }

    /// The file's number.
    pub fn number(&self) -> FileNumber {
        self.number
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records in the whole file.
    pub fn records(&self) -> u64 {
        self.footer.records
    }

    /// Blocks in the whole file.
    pub fn blocks(&self) -> u32 {
        self.footer.blocks
    }

    /// The file's size in bytes.
    pub fn file_bytes(&self) -> u64 {
        self.file_bytes
    }

    /// The lowest and highest hash in the file.
    pub fn hash_range(&self) -> (Hash64, Hash64) {
        (self.footer.lowest_hash, self.footer.highest_hash)
    }

    /// The KMV sketch of the file's keys.
    pub fn sketch(&self) -> &Sketch {
        &self.sketch
    }

    /// Bytes of memory the filter, the index and the sketch take: what
    /// the store spends per key to answer GETs.
    pub fn index_memory_bytes(&self) -> usize {
        self.bloom.memory_bytes()
            + self.first_hashes.capacity() * size_of::<Hash64>()
            + self.pages.memory_bytes()
            + self.sketch.memory_bytes()
    }

    /// The share of GETs of absent keys that its filter lets through to a
    /// block read.
    pub fn false_positive_rate(&self) -> f64 {
        self.false_positive_rate
    }

    /// Whether the file may hold a key with this hash.
    #[inline]
    pub fn may_contain(&self, hash: Hash64) -> bool {
        self.bloom.may_contain(hash)
    }

    /// Where block `block` starts in the file.
    pub fn block_offset(&self, block: u32) -> u64 {
        if (block as usize) < self.pages.len() {
            u64::from(self.pages.entry(block as usize) & !CONTINUES) * u64::from(self.footer.block_bytes)
        } else {
            self.footer.filter_offset
        }
    }

    /// Whether block `block` starts with the hash the previous block ends with.
    fn continues(&self, block: u32) -> bool {
        self.pages.entry(block as usize) & CONTINUES != 0
    }

    /// The first block of `first..end` that can hold `hash`: the last
    /// whose first hash is at most `hash`, moved back over blocks that
    /// continue a run of `hash`. `None` when every block starts above it.
    fn block_for(&self, hash: Hash64, first: u32, end: u32) -> Option<u32> {
        let hashes = &self.first_hashes[first as usize..end as usize];
        let at_most = hashes.partition_point(|&first_hash| first_hash <= hash);
        let mut block = first + at_most.checked_sub(1)? as u32;
        while block > first && self.continues(block) && self.first_hashes[block as usize] == hash {
            block -= 1;
        }
        Some(block)
    }

    /// Reads block `block` into `buffer` (replacing its contents), checks
    /// its checksum and returns its records' bytes within `buffer`.
    fn read_block(
        &self,
        handle: &dyn FsFile,
        block: u32,
        buffer: &mut Vec<u8>,
    ) -> Result<std::ops::Range<usize>> {
        let offset = self.block_offset(block);
        let len = (self.block_offset(block + 1) - offset) as usize;
        buffer.clear();
        handle.read_exact_append(buffer, len, offset)?;
        self.check_block(buffer, 0, offset)
    }

    /// Checks the block at `bytes[start..]` (file offset `offset`); returns
    /// the range of its records in `bytes`.
    fn check_block(&self, bytes: &[u8], start: usize, offset: u64) -> Result<std::ops::Range<usize>> {
        check_block_at(&self.path, self.number, bytes, start, offset)
    }
}

/// Checks the block at `bytes[start..]` (file offset `offset`) of list
/// `number` at `path`; returns the range of its records in `bytes`.
fn check_block_at(
    path: &Path,
    number: FileNumber,
    bytes: &[u8],
    start: usize,
    offset: u64,
) -> Result<std::ops::Range<usize>> {
    let corrupt = |what: String| Error::corruption(path, offset, format!("list block: {what}"));
    let header = bytes
        .get(start..start + BLOCK_HEADER_BYTES)
        .ok_or_else(|| corrupt("truncated".into()))?;
    let payload_len = u32::from_le_bytes(header.try_into().expect("4 bytes")) as usize;
    let end = start + BLOCK_HEADER_BYTES + payload_len;
    let Some(crc) = bytes.get(end..end + BLOCK_TRAILER_BYTES) else {
        return Err(corrupt(format!(
            "payload of {payload_len} bytes runs past the block"
        )));
    };
    let crc = u32::from_le_bytes(crc.try_into().expect("4 bytes"));
    if block_crc(number, offset, &bytes[start..end]) != crc {
        return Err(corrupt("checksum mismatch".into()));
    }
    Ok(start + BLOCK_HEADER_BYTES..end)
}

/// A record owned outside any buffer: hash, kind, key, value.
pub type OwnedRecord = (Hash64, Kind, Vec<u8>, Vec<u8>);

/// What [`salvage_blocks`] found in a list file's blocks.
#[derive(Debug, Default)]
pub struct Salvaged {
    /// The records of every block whose checksum holds, in file order.
    pub records: Vec<OwnedRecord>,
    /// The byte ranges of blocks that failed, `start..end`.
    pub bad: Vec<(u64, u64)>,
    /// Bytes of the blocks that held.
    pub good_bytes: u64,
}

/// Reads the blocks of list `number` (`bytes`, the whole file; blocks of
/// `block_bytes` up to `blocks_end`) without its index, as repair does: a
/// block that fails its checksum is skipped to the next page boundary
/// where a good block starts, so that the records of every good block
/// are kept.
pub fn salvage_blocks(
    path: &Path,
    number: FileNumber,
    bytes: &[u8],
    block_bytes: u32,
    blocks_end: u64,
) -> Salvaged {
    let mut salvaged = Salvaged::default();
    let page = u64::from(block_bytes.max(1));
    let end = blocks_end.min(bytes.len() as u64);
    let mut at = 0u64;
    while at < end {
        let checked =
            check_block_at(path, number, &bytes[..end as usize], at as usize, at).and_then(|records| {
                let mut found = Vec::new();
                let mut offset = records.start;
                while offset < records.end {
                    let (record, used) =
                        record::decode(&bytes[offset..records.end]).map_err(|error| error.at(path, at))?;
                    found.push((
                        record.hash,
                        record.kind,
                        record.key.to_vec(),
                        record.value.to_vec(),
                    ));
                    offset += used;
                }
                Ok((records.end + BLOCK_TRAILER_BYTES, found))
            });
        match checked {
            Ok((block_end, found)) => {
                let next = (block_end as u64).next_multiple_of(page);
                salvaged.records.extend(found);
                salvaged.good_bytes += next.min(end) - at;
                at = next;
            }
            Err(_) => {
                let next = (at + page).min(end);
                match salvaged.bad.last_mut() {
                    Some(last) if last.1 == at => last.1 = next,
                    _ => salvaged.bad.push((at, next)),
                }
                at = next;
            }
        }
    }
    salvaged
}

/// The [`ListMeta`] of the footer `bytes` of list `number` at `path`,
/// which starts at `offset`: a footer read alone.
pub fn footer_meta(path: &Path, number: FileNumber, offset: u64, bytes: &[u8]) -> Result<ListMeta> {
    Footer::decode(path, number, offset, bytes).map(|footer| footer.meta)
}

/// What a list's footer says, for repair.
#[derive(Debug, Clone, Copy)]
pub struct FooterSummary {
    /// Bytes of a block.
    pub block_bytes: u32,
    /// Where the blocks end (the filter's offset).
    pub blocks_end: u64,
    /// Records in the file.
    pub records: u64,
    /// Where the records came from.
    pub meta: ListMeta,
}

/// Reads the footer of the list file in `bytes` (number `number`, at
/// `path`): what repair needs to place a file whose sections may be
/// damaged.
pub fn read_footer(path: &Path, number: FileNumber, bytes: &[u8]) -> Result<FooterSummary> {
    let Some(footer_offset) = bytes.len().checked_sub(FOOTER_BYTES) else {
        return Err(Error::corruption(
            path,
            0,
            format!("list file of {} bytes has no footer", bytes.len()),
        ));
    };
    let footer = Footer::decode(path, number, footer_offset as u64, &bytes[footer_offset..])?;
    Ok(FooterSummary {
        block_bytes: footer.block_bytes,
        blocks_end: footer.filter_offset,
        records: footer.records,
        meta: footer.meta,
    })
}

impl ListFile {
    /// Reads every block and checks everything the footer and sections
    /// claim: block checksums, records in strict (hash, key) order with
    /// hashes that match their keys, the first-hash index, the filter
    /// (no false negatives), the record count, the hash range and the
    /// sketch. Returns the number of records.
    pub fn verify(&self, handle: &dyn FsFile, interrupt: &spillway_core::Interrupt) -> Result<u64> {
        if let Some(error) = self.damage_error() {
            return Err(error);
        }
        let mut buffer = Vec::new();
        let mut hashes = Vec::with_capacity(self.footer.records.min(1 << 24) as usize);
        let mut previous_key = Vec::new();
        for block in 0..self.footer.blocks {
            if block % 1024 == 0 {
                interrupt.check()?;
            }
            let records = self.read_block(handle, block, &mut buffer)?;
            let offset = self.block_offset(block);
            let corrupt =
                |what: String| Error::corruption(&self.path, offset, format!("list block {block}: {what}"));
            if records.is_empty() {
                return Err(corrupt("no records".into()));
            }
            let mut at = records.start;
            while at < records.end {
                let (record, used) = record::decode(&buffer[at..records.end])
                    .map_err(|error| corrupt(error.what().to_string()))?;
                let previous = hashes.last().copied();
                if at == records.start {
                    if record.hash != self.first_hashes[block as usize] {
                        return Err(corrupt(format!(
                            "starts with hash {:#x}, the index says {:#x}",
                            record.hash, self.first_hashes[block as usize]
                        )));
                    }
                    if (previous == Some(record.hash)) != self.continues(block) {
                        return Err(corrupt("its index entry's continuation flag is wrong".into()));
                    }
                }
                if previous.is_some_and(|hash| (hash, previous_key.as_slice()) >= (record.hash, record.key)) {
                    return Err(corrupt(format!("record of hash {:#x} out of order", record.hash)));
                }
                if spillway_core::hash64(record.key) != record.hash {
                    return Err(corrupt(format!(
                        "record of hash {:#x} holds a key of another hash",
                        record.hash
                    )));
                }
                if !self.bloom.may_contain(record.hash) {
                    return Err(corrupt(format!("the filter misses hash {:#x}", record.hash)));
                }
                hashes.push(record.hash);
                previous_key.clear();
                previous_key.extend_from_slice(record.key);
                at += used;
            }
        }
        let corrupt =
            |what: String| Error::corruption(&self.path, self.file_bytes - FOOTER_BYTES as u64, what);
        if hashes.len() as u64 != self.footer.records {
            return Err(corrupt(format!(
                "footer says {} records, the blocks hold {}",
                self.footer.records,
                hashes.len()
            )));
        }
        if (hashes[0], hashes[hashes.len() - 1]) != (self.footer.lowest_hash, self.footer.highest_hash) {
            return Err(corrupt("footer's hash range disagrees with the records".into()));
        }
        if Sketch::build(&hashes, SKETCH_ENTRIES) != self.sketch {
            return Err(Error::corruption(
                &self.path,
                self.footer.sketch_offset,
                "the sketch disagrees with the records",
            ));
        }
        Ok(hashes.len() as u64)
    }
}

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
    list: ListRef,
    handle: Arc<dyn FsFile>,
    next_block: u32,
    chunk: Vec<u8>,
    /// The records of each block in `chunk`, with the block's file offset.
    blocks: Vec<(std::ops::Range<usize>, u64)>,
    block: usize,
    at: usize,
    current: Option<RecordSpan>,
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
    fn read_chunk(&mut self) -> Result<()> {
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

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Arc;

    use spillway_core::{hash64, SimFs};

    use super::*;
    use crate::cache::FileCache;
    use crate::record::Kind;

    /// A record as the test writes it: hash, key, value.
    pub(crate) type Written = (Hash64, Vec<u8>, Vec<u8>);

    /// Writes list `number` of `keys` keys (sorted by hash), the value of
    /// every `big`-th key larger than a block; returns it and its keys.
    pub(crate) fn write(
        fs: &Arc<SimFs>,
        number: FileNumber,
        keys: u64,
        big: u64,
    ) -> (Arc<ListFile>, Vec<Written>) {
        let mut records: Vec<Written> = (0..keys)
            .map(|i| {
                let key = format!("key {i}").into_bytes();
                let len = if big > 0 && i % big == 0 { 1500 } else { 40 };
                (hash64(&key), key, vec![i as u8; len])
            })
            .collect();
        records.sort();
        let meta = ListMeta {
            store_id: 7,
            seq_min: number * 100,
            seq_max: number * 100 + 99,
            cover_low: 0,
            cover_high: u64::MAX,
        };
        let mut writer = ListWriter::create(
            fs.as_ref(),
            Path::new("/l"),
            number,
            512,
            FilterBits::fixed(10),
            meta,
        )
        .unwrap();
        for (hash, key, value) in &records {
            let record = RecordRef {
                hash: *hash,
                kind: Kind::Put,
                key,
                value,
            };
            writer.add(&record).unwrap();
        }
        (writer.finish().unwrap(), records)
    }

    #[test]
    fn one_page_blocks_keep_one_bit_of_index_beside_each_first_hash() {
        let fs = Arc::new(SimFs::new());
        fs.create_dir_all(Path::new("/l")).unwrap();
        let cache = FileCache::new(fs.clone(), 8);
        for (number, big) in [(1, 0), (2, 7)] {
            let (written, records) = write(&fs, number, 2000, big);
            let opened = ListFile::open(fs.as_ref(), Path::new("/l"), number).unwrap();
            for file in [&written, &opened] {
                // Values larger than a block make blocks of several pages: pages are listed.
                match (&file.pages, big) {
                    (BlockPages::OnePage { continues, .. }, 0) => {
                        assert_eq!(continues.len(), (file.blocks() as usize).div_ceil(64))
                    }
                    (BlockPages::Listed(entries), 7) => assert_eq!(entries.len(), file.blocks() as usize),
                    (pages, _) => panic!("{pages:?} for big = {big}"),
                }
                let offsets: Vec<u64> = (0..=file.blocks())
                    .map(|block| file.block_offset(block))
                    .collect();
                assert!(offsets.windows(2).all(|pair| pair[0] < pair[1]), "{offsets:?}");
                assert_eq!(offsets[file.blocks() as usize], file.footer.filter_offset);
                let list = ListRef::whole(file.clone());
                let mut buffer = Vec::new();
                for (hash, key, value) in &records {
                    let mut found = None;
                    list.get(&cache, *hash, key, &mut buffer, |kind, bytes| {
                        found = Some((kind, bytes.to_vec()))
                    })
                    .unwrap();
                    assert_eq!(found, Some((Kind::Put, value.clone())), "key {key:?}");
                }
            }
            let index = written.first_hashes.len() * size_of::<Hash64>();
            let entries = written.blocks() as usize * size_of::<u32>();
            let sections = written.bloom.memory_bytes() + written.sketch.memory_bytes() + index;
            if big == 0 {
                assert!(
                    written.index_memory_bytes() < sections + entries / 8,
                    "{}",
                    written.index_memory_bytes()
                );
            } else {
                assert_eq!(written.index_memory_bytes(), sections + entries);
            }
        }
    }
}
