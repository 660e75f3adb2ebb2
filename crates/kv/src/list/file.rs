//! An open list file: its footer and the indexes a GET needs, in memory;
//! reading and checking its blocks, `verify`, and salvaging the good
//! blocks of a damaged file for repair.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use spillway_core::{block_crc, Error, Fs, FsFile, Hash64, Result};

use super::{
    file_name, FileNumber, Footer, ListMeta, BLOCK_HEADER_BYTES, BLOCK_TRAILER_BYTES, CONTINUES,
    FOOTER_BYTES, INDEX_ENTRY_BYTES,
};
use crate::bloom::Bloom;
use crate::kmv::{Sketch, SKETCH_ENTRIES};
use crate::record::{self, Kind};

/// An open list file: its footer and the indexes a GET needs, in memory.
pub struct ListFile {
    pub(super) number: FileNumber,
    pub(super) path: PathBuf,
    pub(super) footer: Footer,
    pub(super) file_bytes: u64,
    pub(super) first_hashes: Vec<Hash64>,
    pub(super) pages: BlockPages,
    pub(super) bloom: Bloom,
    /// The filter's expected false-positive rate (computed once: a GET
    /// does not need it, the worker sums it over nodes' lists).
    pub(super) false_positive_rate: f64,
    pub(super) sketch: Sketch,
    /// For a file a read-only store could not open (missing, or its
    /// footer or sections damaged): what was wrong, returned by every read
    /// that needs it. Such a file has no blocks, filter or index.
    pub(super) damage: Option<Damage>,
}

/// Why a list file cannot be read, and where.
#[derive(Debug, Clone)]
pub(super) struct Damage {
    pub(super) offset: u64,
    pub(super) what: String,
}

/// Each block's index entry beside its first hash: its first page, with
/// [`CONTINUES`]. Held for the file's life, so held small: when every
/// block is one page (no record outgrew a block, the usual case) block
/// `i` starts at page `i`, and only the continuation bits are kept, 1 bit
/// a block instead of 4 bytes (at 256-byte records, 0.25 bytes per key).
#[derive(Debug)]
pub(super) enum BlockPages {
    /// Block `i` starts at page `i`; bit `i` set: it has [`CONTINUES`].
    OnePage { blocks: usize, continues: Vec<u64> },
    /// Each block's entry as the file holds it.
    Listed(Vec<u32>),
}

impl BlockPages {
    pub(super) fn new(mut entries: Vec<u32>) -> Self {
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

    pub(super) fn len(&self) -> usize {
        match self {
            BlockPages::OnePage { blocks, .. } => *blocks,
            BlockPages::Listed(entries) => entries.len(),
        }
    }

    /// Block `block`'s entry: its first page, with [`CONTINUES`].
    pub(super) fn entry(&self, block: usize) -> u32 {
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

    pub(super) fn memory_bytes(&self) -> usize {
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
    pub(super) fn check_index(&self) -> Result<()> {
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
    pub(super) fn continues(&self, block: u32) -> bool {
        self.pages.entry(block as usize) & CONTINUES != 0
    }

    /// The first block of `first..end` that can hold `hash`: the last
    /// whose first hash is at most `hash`, moved back over blocks that
    /// continue a run of `hash`. `None` when every block starts above it.
    pub(super) fn block_for(&self, hash: Hash64, first: u32, end: u32) -> Option<u32> {
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
    pub(super) fn read_block(
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
    pub(super) fn check_block(
        &self,
        bytes: &[u8],
        start: usize,
        offset: u64,
    ) -> Result<std::ops::Range<usize>> {
        check_block_at(&self.path, self.number, bytes, start, offset)
    }
}

/// Checks the block at `bytes[start..]` (file offset `offset`) of list
/// `number` at `path`; returns the range of its records in `bytes`.
pub(super) fn check_block_at(
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
