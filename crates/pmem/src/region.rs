//! A region: the bytes a persistent structure lives in, addressed by
//! offsets (never pointers: a region maps at a different address every
//! time). Backed by a shared mapping of a file (on `/dev/shm`, a DAX mount
//! or an ordinary file system), or by the heap (tests, crash images, Miri).
//!
//! Its first cache line is the header:
//!
//! | bytes | field | |
//! |---|---|---|
//! | 0..8 | magic `SPWYPMEM` | |
//! | 8..12 | format version (1), u32 LE | |
//! | 12..16 | CRC-32C of bytes 0..12 and 16..40 | |
//! | 16..24 | the structure's kind, ASCII, zero-padded (`cceh`) | |
//! | 24..32 | the region's size in bytes, u64 LE | |
//! | 32..40 | reserved, 0 | |
//! | 40..48 | the root: the offset of the structure's root object, 0 for none | written by one 8-byte store, outside the checksum |
//! | 48..64 | reserved, 0 | |
//!
//! The checksummed fields never change after creation, so the root can be
//! swapped failure-atomically without rewriting the checksum; `open` checks
//! that the root is 0 or an aligned offset inside the region.

use std::fs::{File, OpenOptions};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;

use spillway_core::{checksum::crc32c, ensure, Error, Result};

/// Bytes in a cache line: the unit a flush writes back, the unit whose
/// stores persist in program order, and the header's size.
pub const LINE: u64 = 64;

/// The header's magic bytes.
pub const MAGIC: [u8; 8] = *b"SPWYPMEM";

/// The region format this build writes and reads.
pub const VERSION: u32 = 1;

/// Bytes of the header (one cache line); a structure's data starts here.
pub const HEADER: u64 = LINE;

/// Offset of the root word.
pub const ROOT_AT: u64 = 40;

/// The smallest region: one page.
pub const MIN_SIZE: u64 = 4096;

/// A huge page's bytes (x86-64): a file mapping starts on this boundary.
const HUGE_PAGE: usize = 2 << 20;

/// Where a region's bytes live.
#[derive(Debug)]
enum Backing {
    /// A shared mapping of `file`: `len` bytes at the region's `base`.
    Map { file: File },
    /// Heap words (8-aligned, zero-initialised), owned here while `base`
    /// points into them.
    Heap { _words: Box<[AtomicU64]> },
}

/// A region of persistent memory (see the module documentation).
#[derive(Debug)]
pub struct Region {
    backing: Backing,
    /// The first byte: the mapping's, or the heap words'. (Kept apart from
    /// `backing` so that a word's address is an add, not a match.)
    base: *mut u8,
    len: u64,
    /// The file, for errors (`<memory>` for a heap region).
    path: PathBuf,
}

// SAFETY: the mapping is shared memory owned by the region for its whole
// life; every concurrent access goes through atomics (`word`) or touches
// bytes the caller owns exclusively (see `write_bytes` and `bytes`).
#[allow(unsafe_code)]
unsafe impl Send for Region {}
// SAFETY: as above.
#[allow(unsafe_code)]
unsafe impl Sync for Region {}

impl Drop for Region {
    fn drop(&mut self) {
        if let Backing::Map { .. } = self.backing {
            // SAFETY: `base` and `len` are the mapping made in `map`, unmapped once.
            #[allow(unsafe_code)]
            unsafe {
                libc::munmap(self.base.cast(), self.len as usize);
            }
        }
    }
}

/// The KiB mapped in 2 MiB pages (file, shared-memory or anonymous) by
/// the mapping that starts at `address`, from the text of an smaps file.
fn huge_kib_at(smaps: &str, address: usize) -> u64 {
    let start = format!("{address:x}-");
    let mut lines = smaps.lines().skip_while(|line| !line.starts_with(&start));
    let Some(_) = lines.next() else { return 0 };
    // A field line reads "Name:   123 kB"; the next mapping's starts with
    // its address range, whose first word has no colon.
    lines
        .take_while(|line| {
            line.split_whitespace()
                .next()
                .is_some_and(|word| word.ends_with(':'))
        })
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            matches!(name, "FilePmdMapped" | "ShmemPmdMapped" | "AnonHugePages")
                .then(|| rest.trim().trim_end_matches("kB").trim().parse::<u64>().ok())?
        })
        .sum()
}

/// The kind field's bytes for `kind` (at most 8 ASCII bytes).
fn kind_bytes(kind: &str) -> Result<[u8; 8]> {
    ensure!(
        !kind.is_empty() && kind.len() <= 8 && kind.bytes().all(|b| b.is_ascii_graphic()),
        InvalidArgument,
        "a region's kind is 1 to 8 printable ASCII characters, not {kind:?}"
    );
    let mut bytes = [0u8; 8];
    bytes[..kind.len()].copy_from_slice(kind.as_bytes());
    Ok(bytes)
}

/// The checksum of a header's fixed fields.
fn header_crc(header: &[u8]) -> u32 {
    let mut fixed = Vec::with_capacity(36);
    fixed.extend_from_slice(&header[0..12]);
    fixed.extend_from_slice(&header[16..40]);
    crc32c(&fixed)
}

/// A new header for a region of `size` bytes holding a `kind`.
fn new_header(kind: [u8; 8], size: u64) -> [u8; HEADER as usize] {
    let mut header = [0u8; HEADER as usize];
    header[0..8].copy_from_slice(&MAGIC);
    header[8..12].copy_from_slice(&VERSION.to_le_bytes());
    header[16..24].copy_from_slice(&kind);
    header[24..32].copy_from_slice(&size.to_le_bytes());
    let crc = header_crc(&header);
    header[12..16].copy_from_slice(&crc.to_le_bytes());
    header
}

fn check_size(size: u64) -> Result<()> {
    ensure!(
        size >= MIN_SIZE && size.is_multiple_of(MIN_SIZE),
        InvalidArgument,
        "a region's size must be a whole number of {MIN_SIZE}-byte pages, at least one, not {size} bytes"
    );
    Ok(())
}

impl Region {
    /// Creates a region of `size` bytes for a structure of kind `kind` in a
    /// new file at `path` (an existing file is refused, never overwritten),
    /// its header durable on the file system (`sync`) when this returns.
    pub fn create(path: &Path, size: u64, kind: &str) -> Result<Region> {
        let kind = kind_bytes(kind)?;
        check_size(size)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|error| Error::io(format!("creating the region {}", path.display()), error))?;
        file.set_len(size).map_err(|error| {
            Error::io(
                format!("sizing the region {} to {size} bytes", path.display()),
                error,
            )
        })?;
        let region = Region::map(path, file, size)?;
        region.write_bytes(0, &new_header(kind, size));
        region.sync()?;
        Ok(region)
    }

    /// Opens the region at `path`, which must hold a structure of kind
    /// `kind`: its header is checked (magic, version, checksum, kind, size
    /// against the file's, the root's bounds).
    pub fn open(path: &Path, kind: &str) -> Result<Region> {
        let kind = kind_bytes(kind)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|error| Error::io(format!("opening the region {}", path.display()), error))?;
        let size = file
            .metadata()
            .map_err(|error| {
                Error::io(
                    format!("reading the size of the region {}", path.display()),
                    error,
                )
            })?
            .len();
        if size < HEADER {
            return Err(Error::corruption(
                path,
                0,
                format!("{size} bytes: too short for a region's {HEADER}-byte header"),
            ));
        }
        let region = Region::map(path, file, size)?;
        region.check_header(kind)?;
        Ok(region)
    }

    /// The kind of structure the region file at `path` holds (`cceh`,
    /// `b3tree`), read from its header (magic and checksum checked), for
    /// tools that open any region.
    pub fn kind_of(path: &Path) -> Result<String> {
        use std::io::Read;
        let mut header = [0u8; HEADER as usize];
        File::open(path)
            .and_then(|mut file| file.read_exact(&mut header))
            .map_err(|error| {
                Error::io(
                    format!("reading the header of the region {}", path.display()),
                    error,
                )
            })?;
        let stored = u32::from_le_bytes(header[12..16].try_into().expect("4 bytes"));
        if header[0..8] != MAGIC || stored != header_crc(&header) {
            return Err(Error::corruption(
                path,
                0,
                "not a Spillway persistent-memory region (no SPWYPMEM magic, or its header's checksum fails)",
            ));
        }
        Ok(kind_name(&header[16..24]))
    }

    /// A region of `size` bytes in memory (zeroed, with a header): for
    /// tests, and where nothing needs to outlive the process.
    pub fn in_memory(size: u64, kind: &str) -> Result<Region> {
        let kind = kind_bytes(kind)?;
        check_size(size)?;
        let region = Region::heap(size);
        region.write_bytes(0, &new_header(kind, size));
        Ok(region)
    }

    /// A region in memory holding a copy of `image` (a crash image, or a
    /// file's bytes), checked as [`open`](Self::open) checks a file.
    pub fn from_image(image: &[u8], kind: &str) -> Result<Region> {
        let kind = kind_bytes(kind)?;
        let size = image.len() as u64;
        if size < HEADER || !size.is_multiple_of(8) {
            return Err(Error::corruption(
                "<image>",
                0,
                format!("{size} bytes: not a region (a header of {HEADER} bytes and whole words)"),
            ));
        }
        let region = Region::heap(size);
        region.write_bytes(0, image);
        region.check_header(kind)?;
        Ok(region)
    }

    fn heap(size: u64) -> Region {
        let words: Box<[AtomicU64]> = (0..size / 8).map(|_| AtomicU64::new(0)).collect();
        Region {
            base: words.as_ptr().cast_mut().cast(),
            backing: Backing::Heap { _words: words },
            len: size,
            path: PathBuf::from("<memory>"),
        }
    }

    fn map(path: &Path, file: File, size: u64) -> Result<Region> {
        // One writer per region: a second open (in this process or
        // another) would write the same bytes with its own allocator.
        // SAFETY: an advisory lock on an open descriptor; released when
        // the file is closed (with the region).
        #[allow(unsafe_code)]
        let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
        if !locked {
            let error = std::io::Error::last_os_error();
            if error.kind() == std::io::ErrorKind::WouldBlock {
                return Err(Error::InvalidArgument(format!(
                    "the region {} is open elsewhere (it is locked): close it there first",
                    path.display()
                )));
            }
            return Err(Error::io(format!("locking the region {}", path.display()), error));
        }
        ensure!(
            usize::try_from(size).is_ok(),
            ResourcesExhausted,
            "the region {} of {size} bytes does not fit this machine's address space",
            path.display()
        );
        let failed = |what: &str| {
            Error::io(
                format!("{what} the region {}", path.display()),
                std::io::Error::last_os_error(),
            )
        };
        // The mapping starts on a 2 MiB boundary, so that the kernel can map
        // it in 2 MiB pages where the file's pages are that large (a DAX
        // mount, a tmpfs mounted with `huge=advise` or `huge=always`).
        // Every search and insert reaches a random line of the table, and
        // with 4 KiB pages each also walks the page table (at 10^7 keys
        // that more than doubled a search's time). An address range with a
        // spare 2 MiB is reserved first, the file mapped over its first
        // boundary, and the rest handed back.
        let len = size as usize;
        // SAFETY: reserves address space only (no access, no memory).
        #[allow(unsafe_code)]
        let reserved = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len + HUGE_PAGE,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if reserved == libc::MAP_FAILED {
            return Err(failed("reserving addresses for"));
        }
        let start = reserved as usize;
        let aligned = start.next_multiple_of(HUGE_PAGE);
        // SAFETY: maps `size` bytes of an open file, shared, readable and
        // writable, over addresses reserved above (MAP_FIXED replaces only
        // our own reservation); the result is checked, and unmapped once on
        // drop. The unmapped head and tail are the reservation's own.
        #[allow(unsafe_code)]
        let base = unsafe {
            let base = libc::mmap(
                aligned as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                file.as_raw_fd(),
                0,
            );
            if base == libc::MAP_FAILED {
                let error = failed("mapping");
                libc::munmap(reserved, len + HUGE_PAGE);
                return Err(error);
            }
            if aligned > start {
                libc::munmap(reserved, aligned - start);
            }
            let end = aligned + len;
            if start + len + HUGE_PAGE > end {
                libc::munmap(end as *mut libc::c_void, start + len + HUGE_PAGE - end);
            }
            // A hint: where the kernel has no 2 MiB pages for this file it
            // maps 4 KiB ones, and the region works the same.
            libc::madvise(base, len, libc::MADV_HUGEPAGE);
            base
        };
        Ok(Region {
            base: base.cast(),
            backing: Backing::Map { file },
            len: size,
            path: path.to_path_buf(),
        })
    }

    fn check_header(&self, kind: [u8; 8]) -> Result<()> {
        let header = self.bytes(0, HEADER);
        let bad = |offset: u64, what: String| Err(Error::corruption(&self.path, offset, what));
        if header[0..8] != MAGIC {
            return bad(
                0,
                "not a Spillway persistent-memory region (no SPWYPMEM magic)".into(),
            );
        }
        let version = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
        if version != VERSION {
            return bad(
                8,
                format!("region format version {version}; this build reads version {VERSION}"),
            );
        }
        let stored = u32::from_le_bytes(header[12..16].try_into().expect("4 bytes"));
        let computed = header_crc(header);
        if stored != computed {
            return bad(
                12,
                format!("header checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"),
            );
        }
        if header[16..24] != kind {
            return Err(Error::InvalidArgument(format!(
                "{} holds a {} region, not a {}",
                self.path.display(),
                kind_name(&header[16..24]),
                kind_name(&kind)
            )));
        }
        let size = u64::from_le_bytes(header[24..32].try_into().expect("8 bytes"));
        if size != self.len {
            return bad(
                24,
                format!("the header says {size} bytes, the region has {}", self.len),
            );
        }
        let root = self.root();
        if root != 0 && (root < HEADER || root >= self.len || !root.is_multiple_of(8)) {
            return bad(
                ROOT_AT,
                format!("root offset {root} is outside the region or unaligned"),
            );
        }
        Ok(())
    }

    /// The region's size in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the region is empty (never: a region has a header).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The file behind it (`<memory>` for a heap region), for errors.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes of the region the kernel maps in 2 MiB pages now, from
    /// `/proc/self/smaps`; 0 for a heap region or where that is not known.
    /// A statistic (it reads a file): 0 on a file system that has no 2 MiB
    /// pages for this file, such as a tmpfs mounted without `huge=`.
    pub fn huge_page_bytes(&self) -> u64 {
        match self.backing {
            Backing::Map { .. } => std::fs::read_to_string("/proc/self/smaps")
                .map(|smaps| huge_kib_at(&smaps, self.base as usize) * 1024)
                .unwrap_or(0),
            Backing::Heap { .. } => 0,
        }
    }

    /// The offset of the structure's root object (0: none yet).
    pub fn root(&self) -> u64 {
        self.word(ROOT_AT).load(std::sync::atomic::Ordering::Acquire)
    }

    #[inline]
    fn base(&self) -> *mut u8 {
        self.base
    }

    #[inline]
    fn check_range(&self, at: u64, len: u64) {
        assert!(
            at.checked_add(len).is_some_and(|end| end <= self.len),
            "bytes {at}..{at}+{len} outside the region of {} bytes",
            self.len
        );
    }

    /// The 8-byte word at `at` (8-aligned), as an atomic: every word a
    /// concurrent reader may see is read and written through this.
    #[inline]
    pub fn word(&self, at: u64) -> &AtomicU64 {
        self.check_range(at, 8);
        assert!(at.is_multiple_of(8), "word offset {at} is not 8-aligned");
        // SAFETY: in bounds (checked), 8-aligned (the base is page- or
        // word-aligned and `at` is a multiple of 8), and the memory lives
        // as long as `self`; all access to shared words is atomic.
        #[allow(unsafe_code)]
        unsafe {
            AtomicU64::from_ptr(self.base().add(at as usize).cast())
        }
    }

    /// The cache line at `at` (64-aligned) as its eight words: one bounds
    /// check for a bucket's reads, not one per word.
    #[inline]
    pub fn line(&self, at: u64) -> &[AtomicU64; 8] {
        self.check_range(at, LINE);
        assert!(at.is_multiple_of(LINE), "line offset {at} is not 64-aligned");
        // SAFETY: in bounds (checked), 64-aligned (the base is page- or
        // word-aligned: word alignment is all the atomics need), and the
        // memory lives as long as `self`; all access to it is atomic.
        #[allow(unsafe_code)]
        unsafe {
            &*self.base().add(at as usize).cast::<[AtomicU64; 8]>()
        }
    }

    /// The `count` words from `at` (8-aligned) as atomics: one bounds
    /// check for a walk over a whole page, not one per word.
    #[inline]
    pub fn words(&self, at: u64, count: u64) -> &[AtomicU64] {
        self.check_range(at, count.checked_mul(8).expect("a word count past u64"));
        assert!(at.is_multiple_of(8), "word offset {at} is not 8-aligned");
        // SAFETY: in bounds (checked), 8-aligned, and the memory lives as
        // long as `self`; all access to shared words is atomic.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts(self.base().add(at as usize).cast::<AtomicU64>(), count as usize)
        }
    }

    /// Asks the CPU to start fetching the line of byte `at` (a hint: no
    /// effect on what is read, none off x86-64).
    #[inline]
    pub fn prefetch(&self, at: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            let address = self.base().wrapping_add(at.min(self.len - 1) as usize);
            // SAFETY: a prefetch never faults and reads nothing the program
            // sees; the address is in the mapping.
            #[allow(unsafe_code)]
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(address.cast());
            }
        }
    }

    /// The bytes `at..at + len`, for ranges no one writes while they are
    /// read (a published object's immutable parts, the header).
    pub fn bytes(&self, at: u64, len: u64) -> &[u8] {
        self.check_range(at, len);
        // SAFETY: in bounds (checked); the memory lives as long as `self`,
        // and the caller reads only bytes that no one writes meanwhile.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts(self.base().add(at as usize), len as usize)
        }
    }

    /// Writes `bytes` at `at`: for memory no reader can reach yet (an
    /// unpublished object). `Persist::copy` is the way in.
    pub(crate) fn write_bytes(&self, at: u64, bytes: &[u8]) {
        self.check_range(at, bytes.len() as u64);
        // SAFETY: in bounds (checked); the destination is the caller's
        // alone (unpublished), and does not overlap `bytes` (a slice of
        // other memory: a region's bytes are never passed back to it).
        #[allow(unsafe_code)]
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.base().add(at as usize), bytes.len());
        }
    }

    /// Writes the line at `at` (a line boundary) with non-temporal
    /// stores: they bypass the cache (no read of the line first) and reach
    /// memory in any order, durable after the next fence like a flushed
    /// line. Elsewhere than x86-64, a copy.
    #[inline]
    pub(crate) fn stream_line(&self, at: u64, line: &[u8; LINE as usize]) {
        assert!(
            at.is_multiple_of(LINE),
            "a line streamed to {at}, not a line boundary"
        );
        self.check_range(at, LINE);
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        for (i, word) in line.chunks_exact(8).enumerate() {
            let word = i64::from_le_bytes(word.try_into().expect("8 bytes"));
            // SAFETY: in bounds (checked) and 8-aligned (a line boundary
            // plus whole words); the line is the caller's alone.
            #[allow(unsafe_code)]
            unsafe {
                let address = self.base().add(at as usize + 8 * i).cast::<i64>();
                std::arch::x86_64::_mm_stream_si64(address, word);
            }
        }
        #[cfg(not(all(target_arch = "x86_64", not(miri))))]
        self.write_bytes(at, line);
    }

    /// The address of byte `at`, for a cache-line flush.
    pub(crate) fn address(&self, at: u64) -> *const u8 {
        self.check_range(at, 1);
        self.base().wrapping_add(at as usize).cast_const()
    }

    /// A copy of every byte (a crash image's starting point, a test's view).
    pub fn image(&self) -> Vec<u8> {
        self.bytes(0, self.len).to_vec()
    }

    /// Makes a file region's bytes durable on its file system (`msync`):
    /// on an ordinary file (not DAX), flushes reach the page cache only, and
    /// this is what survives a power failure. Nothing to do in memory.
    pub fn sync(&self) -> Result<()> {
        if let Backing::Map { file } = &self.backing {
            // SAFETY: the whole live mapping made in `map`.
            #[allow(unsafe_code)]
            let failed = unsafe { libc::msync(self.base.cast(), self.len as usize, libc::MS_SYNC) } != 0;
            if failed {
                return Err(Error::io(
                    format!("syncing the region {}", self.path.display()),
                    std::io::Error::last_os_error(),
                ));
            }
            file.sync_all()
                .map_err(|error| Error::io(format!("syncing the region {}", self.path.display()), error))?;
        }
        Ok(())
    }
}

/// A kind field as text.
fn kind_name(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim_end_matches('\0').to_string()
}

#[cfg(test)]
mod tests {
    use super::huge_kib_at;

    #[test]
    fn huge_pages_are_read_from_the_mapping_that_starts_at_the_address() {
        let smaps = "\
7f0000000000-7f0000200000 rw-s 00000000 00:1a 12 /dev/shm/other
Size:               2048 kB
ShmemPmdMapped:     2048 kB
7f4000000000-7f4040000000 rw-s 00000000 00:2b 7 /mnt/huge/table.pmem
Size:            1048576 kB
Rss:               12288 kB
AnonHugePages:         0 kB
ShmemPmdMapped:    10240 kB
FilePmdMapped:      2048 kB
VmFlags: rd wr sh mr mw me ms sd hg
7f5000000000-7f5000001000 r--p 00000000 00:00 0
ShmemPmdMapped:     4096 kB
";
        assert_eq!(huge_kib_at(smaps, 0x7f40_0000_0000), 12288);
        assert_eq!(huge_kib_at(smaps, 0x7f00_0000_0000), 2048);
        assert_eq!(huge_kib_at(smaps, 0x7f60_0000_0000), 0);
    }
}
