//! Saved trees: one file, written whole and renamed into place, read back
//! whole and checked (every checksum, then every invariant).
//!
//! ```text
//! header  64 B  magic "SPWSSTv1" | version u32 | header bytes u32 = 64 | tree id u64 |
//!               dims u32 | dtype u8 (1 f32, 2 f64) | build u8 (1 kmeans, 2 hilbert) | 0 u16 |
//!               points u64 | leaves u32 | nodes u32 | levels u32 | leaf_size u32 | degree u32 |
//!               crc32c of bytes 0..60 u32
//! sections      in the order of SECTIONS, each: kind u32 | 0 u32 | payload bytes u64 | payload |
//!               block_crc(tree id, payload offset, payload) u32 | zeros to a multiple of 8
//! footer  32 B  magic "SPWSSTft" | file bytes u64 | tree id u64 | sections u32 |
//!               crc32c of the footer's bytes 0..28 u32
//! ```
//!
//! All integers little-endian. Arrays are the tree's own (tree.rs): the
//! coordinates leaf by leaf, each leaf's block dimension-major. Every length follows from the header's
//! counts, so nothing is allocated from a length read in the file; a
//! section copied from another tree fails its checksum (the tree id is
//! mixed in).

use std::path::Path;

use spillway_core::{block_crc, crc32c, scratch, Error, Fs, Result};

use crate::options::Build;
use crate::tree::{SsTree, Storage};

const MAGIC: &[u8; 8] = b"SPWSSTv1";
const FOOTER_MAGIC: &[u8; 8] = b"SPWSSTft";
const VERSION: u32 = 1;
const HEADER_BYTES: usize = 64;
const FOOTER_BYTES: usize = 32;
const SECTION_HEADER_BYTES: usize = 16;

/// The sections, in file order.
const SECTIONS: [&str; 12] = [
    "level_start",
    "child_first",
    "child_count",
    "parent",
    "leaf_first",
    "leaf_last",
    "point_count",
    "radii",
    "centres",
    "leaf_point_start",
    "point_ids",
    "coordinates",
];

impl SsTree {
    /// Writes the tree to `path` through `fs`, atomically (a staged file
    /// renamed into place) and durably.
    pub fn save(&self, fs: &dyn Fs, path: &Path) -> Result<()> {
        save(self, fs, path)
    }

    /// Reads a tree saved by [`SsTree::save`], checking every checksum and
    /// invariant: damage is reported as `Corruption` naming the offset.
    pub fn load(fs: &dyn Fs, path: &Path) -> Result<SsTree> {
        load(fs, path)
    }
}

fn save(tree: &SsTree, fs: &dyn Fs, path: &Path) -> Result<()> {
    let partial = scratch::partial_path(path);
    let outcome = (|| {
        let file = fs.create_or_truncate(&partial)?;
        let tree_id = new_tree_id();
        let mut at = 0u64;
        let write = |bytes: &[u8], at: &mut u64| -> Result<()> {
            file.write_at(bytes, *at)?;
            *at += bytes.len() as u64;
            Ok(())
        };
        write(&header(tree, tree_id), &mut at)?;
        for (kind, payload) in payloads(tree).into_iter().enumerate() {
            let mut section = Vec::with_capacity(SECTION_HEADER_BYTES + payload.len() + 16);
            section.extend_from_slice(&(kind as u32 + 1).to_le_bytes());
            section.extend_from_slice(&0u32.to_le_bytes());
            section.extend_from_slice(&(payload.len() as u64).to_le_bytes());
            let payload_offset = at + SECTION_HEADER_BYTES as u64;
            section.extend_from_slice(&payload);
            section.extend_from_slice(&block_crc(tree_id, payload_offset, &payload).to_le_bytes());
            section.resize(section.len().next_multiple_of(8), 0);
            write(&section, &mut at)?;
        }
        let mut footer = Vec::with_capacity(FOOTER_BYTES);
        footer.extend_from_slice(FOOTER_MAGIC);
        footer.extend_from_slice(&(at + FOOTER_BYTES as u64).to_le_bytes());
        footer.extend_from_slice(&tree_id.to_le_bytes());
        footer.extend_from_slice(&(SECTIONS.len() as u32).to_le_bytes());
        footer.extend_from_slice(&crc32c(&footer).to_le_bytes());
        write(&footer, &mut at)?;
        file.sync_data()?;
        drop(file);
        fs.rename(&partial, path)?;
        fs.sync_dir(spillway_core::fs::parent_directory(path))
    })();
    if outcome.is_err() {
        // Best effort: the error being reported matters more.
        let _ = fs.remove_file(&partial);
    }
    outcome
}

fn new_tree_id() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut seed = nanos.to_le_bytes().to_vec();
    seed.extend_from_slice(&std::process::id().to_le_bytes());
    spillway_core::hash64(&seed)
}

fn header(tree: &SsTree, tree_id: u64) -> Vec<u8> {
    let mut header = Vec::with_capacity(HEADER_BYTES);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&VERSION.to_le_bytes());
    header.extend_from_slice(&(HEADER_BYTES as u32).to_le_bytes());
    header.extend_from_slice(&tree_id.to_le_bytes());
    header.extend_from_slice(&(tree.dims as u32).to_le_bytes());
    header.push(match tree.storage {
        Storage::F32(_) => 1,
        Storage::F64(_) => 2,
    });
    header.push(match tree.build {
        Build::KMeans => 1,
        Build::Hilbert => 2,
    });
    header.extend_from_slice(&0u16.to_le_bytes());
    header.extend_from_slice(&(tree.len() as u64).to_le_bytes());
    for count in [
        tree.leaves(),
        tree.nodes(),
        tree.levels(),
        tree.leaf_size,
        tree.degree,
    ] {
        header.extend_from_slice(&(count as u32).to_le_bytes());
    }
    header.extend_from_slice(&crc32c(&header).to_le_bytes());
    debug_assert_eq!(header.len(), HEADER_BYTES);
    header
}

fn payloads(tree: &SsTree) -> Vec<Vec<u8>> {
    fn le<T: Copy, const N: usize>(values: &[T], bytes: impl Fn(T) -> [u8; N]) -> Vec<u8> {
        values.iter().flat_map(|&v| bytes(v)).collect()
    }
    vec![
        le(&tree.level_start, u32::to_le_bytes),
        le(&tree.child_first, u32::to_le_bytes),
        le(&tree.child_count, u32::to_le_bytes),
        le(&tree.parent, u32::to_le_bytes),
        le(&tree.leaf_first, u32::to_le_bytes),
        le(&tree.leaf_last, u32::to_le_bytes),
        le(&tree.point_count, u64::to_le_bytes),
        le(&tree.radii, f64::to_le_bytes),
        le(&tree.centres, f64::to_le_bytes),
        le(&tree.leaf_point_start, u32::to_le_bytes),
        le(&tree.point_ids, u32::to_le_bytes),
        match &tree.storage {
            Storage::F32(v) => le(v, f32::to_le_bytes),
            Storage::F64(v) => le(v, f64::to_le_bytes),
        },
    ]
}

fn load(fs: &dyn Fs, path: &Path) -> Result<SsTree> {
    let file = fs.open_read(path)?;
    let len = file.len()?;
    let mut image =
        vec![0u8; usize::try_from(len).map_err(|_| Error::corruption(path, 0, "file too large"))?];
    file.read_exact_at(&mut image, 0)?;
    let mut tree = decode(&image, path)?;
    crate::build::check(&tree)
        .map_err(|what| Error::corruption(path, 0, format!("SS-tree invariant broken: {what}")))?;
    tree.derive();
    Ok(tree)
}

/// A reader of the image that reports damage with the file and offset.
struct Reader<'a> {
    image: &'a [u8],
    path: &'a Path,
    at: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&mut self, len: usize, what: &str) -> Result<&'a [u8]> {
        let end = self
            .at
            .checked_add(len)
            .filter(|&end| end <= self.image.len())
            .ok_or_else(|| {
                Error::corruption(
                    self.path,
                    self.at as u64,
                    format!("file ends inside {what} ({len} bytes expected)"),
                )
            })?;
        let bytes = &self.image[self.at..end];
        self.at = end;
        Ok(bytes)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.bytes(4, what)?.try_into().unwrap()))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.bytes(8, what)?.try_into().unwrap()))
    }

    fn corrupt(&self, offset: usize, what: impl Into<String>) -> Error {
        Error::corruption(self.path, offset as u64, what)
    }
}

fn decode(image: &[u8], path: &Path) -> Result<SsTree> {
    let mut r = Reader { image, path, at: 0 };
    let header = r.bytes(HEADER_BYTES, "the header")?;
    if &header[..8] != MAGIC {
        return Err(r.corrupt(0, "not a saved SS-tree (bad magic)"));
    }
    let stored_crc = u32::from_le_bytes(header[60..64].try_into().unwrap());
    if crc32c(&header[..60]) != stored_crc {
        return Err(r.corrupt(0, "header checksum mismatch"));
    }
    let mut h = Reader {
        image: header,
        path,
        at: 8,
    };
    let version = h.u32("version")?;
    if version != VERSION {
        return Err(Error::InvalidArgument(format!(
            "{}: SS-tree file version {version}, this build reads version {VERSION}",
            path.display()
        )));
    }
    let header_bytes = h.u32("header size")?;
    let tree_id = h.u64("tree id")?;
    let dims = h.u32("dims")? as usize;
    let kinds = h.bytes(4, "kinds")?;
    let (dtype, build) = (kinds[0], kinds[1]);
    let points = h.u64("points")?;
    let [leaves, nodes, levels, leaf_size, degree] = [(); 5].map(|()| h.u32("counts").map(|v| v as usize));
    let (leaves, nodes, levels, leaf_size, degree) = (leaves?, nodes?, levels?, leaf_size?, degree?);
    let build = match build {
        1 => Build::KMeans,
        2 => Build::Hilbert,
        other => return Err(r.corrupt(37, format!("unknown build kind {other}"))),
    };
    let coordinate_bytes = match dtype {
        1 => 4,
        2 => 8,
        other => return Err(r.corrupt(36, format!("unknown dtype {other}"))),
    };
    if header_bytes as usize != HEADER_BYTES
        || dims == 0
        || points == 0
        || leaves == 0
        || levels == 0
        || nodes < leaves
    {
        return Err(r.corrupt(0, "header counts are inconsistent"));
    }
    let points = usize::try_from(points).map_err(|_| r.corrupt(0, "too many points"))?;
    // Every section's length, from the header's counts.
    let multiply = |a: usize, b: usize| {
        a.checked_mul(b)
            .ok_or_else(|| Error::corruption(path, 0, "header counts overflow"))
    };
    let expected = [
        multiply(levels + 1, 4)?,
        multiply(nodes, 4)?,
        multiply(nodes, 4)?,
        multiply(nodes, 4)?,
        multiply(nodes, 4)?,
        multiply(nodes, 4)?,
        multiply(nodes, 8)?,
        multiply(nodes, 8)?,
        multiply(multiply(nodes, dims)?, 8)?,
        multiply(leaves + 1, 4)?,
        multiply(points, 4)?,
        multiply(multiply(points, dims)?, coordinate_bytes)?,
    ];
    let mut payloads: Vec<&[u8]> = Vec::with_capacity(SECTIONS.len());
    for (index, (&name, &len)) in SECTIONS.iter().zip(&expected).enumerate() {
        let start = r.at;
        let kind = r.u32(name)?;
        let reserved = r.u32(name)?;
        let stored_len = r.u64(name)?;
        if kind as usize != index + 1 || reserved != 0 || stored_len != len as u64 {
            return Err(r.corrupt(
                start,
                format!(
                    "section {name}: kind {kind} of {stored_len} bytes, expected kind {} of {len}",
                    index + 1
                ),
            ));
        }
        let payload_offset = r.at;
        let payload = r.bytes(len, name)?;
        let crc = r.u32(name)?;
        if block_crc(tree_id, payload_offset as u64, payload) != crc {
            return Err(r.corrupt(payload_offset, format!("section {name}: checksum mismatch")));
        }
        let padding_at = r.at;
        if r.bytes(padding_at.next_multiple_of(8) - padding_at, name)?
            .iter()
            .any(|&b| b != 0)
        {
            return Err(r.corrupt(padding_at, format!("section {name}: padding is not zero")));
        }
        payloads.push(payload);
    }
    let footer_at = r.at;
    let footer = r.bytes(FOOTER_BYTES, "the footer")?;
    let footer_ok = &footer[..8] == FOOTER_MAGIC
        && crc32c(&footer[..28]) == u32::from_le_bytes(footer[28..32].try_into().unwrap())
        && u64::from_le_bytes(footer[8..16].try_into().unwrap()) == image.len() as u64
        && u64::from_le_bytes(footer[16..24].try_into().unwrap()) == tree_id
        && u32::from_le_bytes(footer[24..28].try_into().unwrap()) == SECTIONS.len() as u32;
    if !footer_ok || r.at != image.len() {
        return Err(r.corrupt(
            footer_at,
            "footer damaged, or the file is truncated or has bytes after it",
        ));
    }
    let u32s = |bytes: &[u8]| -> Vec<u32> {
        bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    let u64s = |bytes: &[u8]| -> Vec<u64> {
        bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    let f64s = |bytes: &[u8]| -> Vec<f64> {
        bytes
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    };
    let storage = if dtype == 1 {
        Storage::F32(
            payloads[11]
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect(),
        )
    } else {
        Storage::F64(f64s(payloads[11]))
    };
    Ok(SsTree {
        dims,
        leaf_size,
        degree,
        build,
        build_s: 0.0,
        level_start: u32s(payloads[0]),
        child_first: u32s(payloads[1]),
        child_count: u32s(payloads[2]),
        parent: u32s(payloads[3]),
        leaf_first: u32s(payloads[4]),
        leaf_last: u32s(payloads[5]),
        point_count: u64s(payloads[6]),
        radii: f64s(payloads[7]),
        centres: f64s(payloads[8]),
        leaf_point_start: u32s(payloads[9]),
        point_ids: u32s(payloads[10]),
        storage,
        group_centres: Vec::new(),
        max_magnitude: 0.0,
        boxes: Vec::new(),
        gpu: Default::default(),
    })
}
