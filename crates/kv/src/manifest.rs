//! The manifest: the tree as a log of edits, so that every spill and split
//! becomes visible at once, when its edit is durable.
//!
//! ```text
//! CURRENT          = "MANIFEST-" number (6+ digits) "\n"   (replaced by write, sync, rename, directory sync)
//! MANIFEST-NNNNNN  = frame* zeros  (spillway_core::log framing, the manifest's number in each checksum; padded)
//! snapshot payload = 3 u8 | format version u32 LE (2) | store id u64 LE | counters |
//!                    merge operator name: length varint | bytes | removed nodes: 0 varint | nodes
//! edit payload     = 4 u8 | counters | removed nodes: count varint | id varint* | nodes
//! counters         = next file varint | next node varint | log number varint | log's first write varint |
//!                    newest log varint | closed u8 (0, 1) | [closed: end write varint]
//! nodes            = count varint | node*
//! node             = id varint | low u64 LE | high u64 LE | fast splits varint |
//!                    children: count varint | (low u64 LE | id varint)* |
//!                    lists: count varint | (file varint | first block varint | end block varint | low u64 LE | high u64 LE)*
//! ```
//!
//! A manifest starts with a snapshot (the whole tree); each later frame
//! replaces the nodes it names and drops the ones it removes. The log
//! number says which write-ahead logs hold records not yet in the tree
//! (those numbered from it on) and the sequence number the first of them
//! starts at; the newest log is the one the last open started (a clean
//! close records where it ended). When a manifest has grown well past its
//! snapshot the worker writes a new one, starting with a snapshot, and
//! points CURRENT at it.
//!
//! The manifest is padded ([`LogWriter::padded`]): zeros always follow
//! its last frame, so a crash leaves it ending in zeros or a torn edit
//! with zeros after it. A manifest that ends at or inside a frame was cut
//! short or replaced, and is corruption: an edit it lost may have made
//! list files obsolete that later edits deleted, or named files that
//! recovery would otherwise take for leftovers and delete. Stores of the
//! first format (snapshot tag 1, no store identity) are refused with an
//! error that names the format.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use spillway_core::log::{read_log, LogEnd, LogWriter};
use spillway_core::varint;
use spillway_core::{Error, Fs, Hash64, Result};

use crate::list::{FileNumber, ListFile, ListRef};
use crate::tree::{Child, Edit, Node, NodeId, Tree};

/// The file naming the current manifest.
pub const CURRENT: &str = "CURRENT";
/// CURRENT's next contents, before they are renamed over it.
pub const CURRENT_TEMPORARY: &str = "CURRENT.tmp";
const PREFIX: &str = "MANIFEST-";
/// The snapshot tag of the first format, refused with a clear error.
const TAG_SNAPSHOT_V1: u8 = 1;
const TAG_EDIT_V1: u8 = 2;
const TAG_SNAPSHOT: u8 = 3;
const TAG_EDIT: u8 = 4;
/// The store format this build writes and reads.
pub const FORMAT_VERSION: u32 = 2;
/// A manifest is rewritten once it passes this size and four times its snapshot.
const REWRITE_BYTES_MIN: u64 = 4 << 20;

/// The file name of manifest `number`.
pub fn file_name(number: u64) -> String {
    format!("{PREFIX}{number:06}")
}

/// The number a manifest file name stands for.
pub fn parse_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(PREFIX)?;
    (!digits.is_empty() && digits.bytes().all(|byte| byte.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// The counters the manifest keeps beside the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counters {
    /// Every file number below this has been handed out.
    pub next_file: FileNumber,
    /// Every node number below this has been handed out.
    pub next_node: NodeId,
    /// Logs numbered below this hold nothing the tree lacks; the log of
    /// this number exists (it was created before any manifest named it).
    pub log_number: u64,
    /// The sequence number of the first write of log `log_number`: every
    /// write before it is in the tree.
    pub log_seq: u64,
    /// The log the store's last open (or creation) started.
    pub newest_log: u64,
    /// Set by a clean close: the sequence number after the last write,
    /// where log `newest_log` (then the newest) ends with a closing
    /// trailer.
    pub closed_seq: Option<u64>,
}

/// Appends a snapshot of `tree` to `out`.
pub fn encode_snapshot(tree: &Tree, store_id: u64, counters: Counters, merge_name: &str, out: &mut Vec<u8>) {
    out.push(TAG_SNAPSHOT);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&store_id.to_le_bytes());
    encode_counters(counters, out);
    varint::encode_u64(merge_name.len() as u64, out);
    out.extend_from_slice(merge_name.as_bytes());
    varint::encode_u64(0, out);
    varint::encode_u64(tree.len() as u64, out);
    let mut nodes: Vec<&Arc<Node>> = tree.nodes().collect();
    nodes.sort_by_key(|node| node.id);
    for node in nodes {
        encode_node(node, out);
    }
}

/// Appends `edit` to `out`.
pub fn encode_edit(edit: &Edit, counters: Counters, out: &mut Vec<u8>) {
    out.push(TAG_EDIT);
    encode_counters(counters, out);
    varint::encode_u64(edit.removed.len() as u64, out);
    for &id in &edit.removed {
        varint::encode_u64(id, out);
    }
    varint::encode_u64(edit.nodes.len() as u64, out);
    for node in &edit.nodes {
        encode_node(node, out);
    }
}

fn encode_counters(counters: Counters, out: &mut Vec<u8>) {
    varint::encode_u64(counters.next_file, out);
    varint::encode_u64(counters.next_node, out);
    varint::encode_u64(counters.log_number, out);
    varint::encode_u64(counters.log_seq, out);
    varint::encode_u64(counters.newest_log, out);
    match counters.closed_seq {
        None => out.push(0),
        Some(seq) => {
            out.push(1);
            varint::encode_u64(seq, out);
        }
    }
}

fn encode_node(node: &Node, out: &mut Vec<u8>) {
    varint::encode_u64(node.id, out);
    out.extend_from_slice(&node.low.to_le_bytes());
    out.extend_from_slice(&node.high.to_le_bytes());
    varint::encode_u64(u64::from(node.fast_splits), out);
    varint::encode_u64(node.children.len() as u64, out);
    for child in &node.children {
        out.extend_from_slice(&child.low.to_le_bytes());
        varint::encode_u64(child.id, out);
    }
    varint::encode_u64(node.lists.len() as u64, out);
    for list in &node.lists {
        varint::encode_u64(list.file.number(), out);
        varint::encode_u64(u64::from(list.first_block), out);
        varint::encode_u64(u64::from(list.end_block), out);
        out.extend_from_slice(&list.low.to_le_bytes());
        out.extend_from_slice(&list.high.to_le_bytes());
    }
}

/// A list as the manifest names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ListRecord {
    file: FileNumber,
    first_block: u32,
    end_block: u32,
    low: Hash64,
    high: Hash64,
}

/// A node as the manifest describes it, its lists by file number.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NodeRecord {
    id: NodeId,
    low: Hash64,
    high: Hash64,
    fast_splits: u32,
    children: Vec<Child>,
    lists: Vec<ListRecord>,
}

/// Reads a frame's fields, failing with what was wrong.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn u8(&mut self) -> Result<u8, String> {
        let byte = *self.bytes.get(self.at).ok_or("truncated")?;
        self.at += 1;
        Ok(byte)
    }

    fn u64(&mut self) -> Result<u64, String> {
        let bytes = self.bytes.get(self.at..self.at + 8).ok_or("truncated")?;
        self.at += 8;
        Ok(u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
    }

    fn varint(&mut self) -> Result<u64, String> {
        let (value, used) =
            varint::decode_u64(&self.bytes[self.at..]).map_err(|error| error.what().to_string())?;
        self.at += used;
        Ok(value)
    }

    fn counters(&mut self) -> Result<Counters, String> {
        Ok(Counters {
            next_file: self.varint()?,
            next_node: self.varint()?,
            log_number: self.varint()?,
            log_seq: self.varint()?,
            newest_log: self.varint()?,
            closed_seq: match self.u8()? {
                0 => None,
                1 => Some(self.varint()?),
                other => return Err(format!("closed flag {other}")),
            },
        })
    }

    /// The format and store identity at the front of a snapshot.
    fn snapshot_head(&mut self) -> Result<u64, String> {
        let bytes = self.bytes.get(self.at..self.at + 12).ok_or("truncated")?;
        self.at += 12;
        let version = u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"));
        if version != FORMAT_VERSION {
            return Err(format!(
                "store format version {version}, this build reads version {FORMAT_VERSION}"
            ));
        }
        Ok(u64::from_le_bytes(bytes[4..].try_into().expect("8 bytes")))
    }

    fn u32_varint(&mut self) -> Result<u32, String> {
        let value = self.varint()?;
        u32::try_from(value).map_err(|_| format!("{value} does not fit 32 bits"))
    }

    /// A count of items at least `item_bytes` long each, checked against
    /// the bytes left before anything is allocated for it.
    fn count(&mut self, item_bytes: usize) -> Result<usize, String> {
        let count = self.varint()?;
        let left = (self.bytes.len() - self.at) as u64;
        if count.saturating_mul(item_bytes as u64) > left {
            return Err(format!("count {count} runs past the frame"));
        }
        Ok(count as usize)
    }

    fn node(&mut self) -> Result<NodeRecord, String> {
        let id = self.varint()?;
        let low = self.u64()?;
        let high = self.u64()?;
        let fast_splits = self.u32_varint()?;
        let children = (0..self.count(9)?)
            .map(|_| {
                Ok(Child {
                    low: self.u64()?,
                    id: self.varint()?,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        let lists = (0..self.count(19)?)
            .map(|_| {
                Ok(ListRecord {
                    file: self.varint()?,
                    first_block: self.u32_varint()?,
                    end_block: self.u32_varint()?,
                    low: self.u64()?,
                    high: self.u64()?,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(NodeRecord {
            id,
            low,
            high,
            fast_splits,
            children,
            lists,
        })
    }
}

/// The store's state as the current manifest leaves it.
#[derive(Debug)]
pub struct Recovered {
    /// The tree.
    pub tree: Tree,
    /// The counters.
    pub counters: Counters,
    /// The merge operator's name ("" for none).
    pub merge_name: String,
    /// The store's identity.
    pub store_id: u64,
    /// The manifest's number.
    pub manifest_number: u64,
    /// Where its frames end and what follows them.
    pub manifest_end: LogEnd,
    /// Bytes of its snapshot frame.
    pub snapshot_bytes: u64,
}

/// The error for a store of the first format, which this build does not read.
fn old_format(path: &Path, offset: u64) -> Error {
    Error::corruption(
        path,
        offset,
        "a manifest of store format 1, written by an older Spillway (no store identity, no log chain): \
         this build reads format 2 only; load the data into a new store with the older version's `kv scan`",
    )
}

/// The manifest CURRENT names, or `None` for a directory without one.
pub fn current(fs: &dyn Fs, dir: &Path) -> Result<Option<u64>> {
    let path = dir.join(CURRENT);
    if !fs.exists(&path)? {
        return Ok(None);
    }
    let file = fs.open_read(&path)?;
    let len = file.len()? as usize;
    if len > 64 {
        return Err(Error::corruption(
            &path,
            0,
            format!("{len} bytes, not a manifest name"),
        ));
    }
    let mut bytes = Vec::with_capacity(len);
    file.read_exact_append(&mut bytes, len, 0)?;
    let name = std::str::from_utf8(&bytes)
        .ok()
        .and_then(|text| text.strip_suffix('\n'));
    match name.and_then(parse_name) {
        Some(number) => Ok(Some(number)),
        None => Err(Error::corruption(
            &path,
            0,
            format!("{:?} is not a manifest name", String::from_utf8_lossy(&bytes)),
        )),
    }
}

/// The merge operator's name the manifest in `dir` records ("" for
/// none), read from its snapshot alone; `None` for a directory without a
/// store.
pub fn merge_name(fs: &dyn Fs, dir: &Path) -> Result<Option<String>> {
    let Some(number) = current(fs, dir)? else {
        return Ok(None);
    };
    let path = dir.join(file_name(number));
    let mut name = None;
    read_log(fs, &path, number, |offset, payload| {
        if name.is_none() {
            let mut reader = Reader {
                bytes: payload,
                at: 0,
            };
            let mut decode = || -> Result<String, String> {
                match reader.u8()? {
                    TAG_SNAPSHOT => {}
                    TAG_SNAPSHOT_V1 => return Err(String::new()),
                    _ => return Err("the first frame is not a snapshot".into()),
                }
                reader.snapshot_head()?;
                reader.counters()?;
                let len = reader.count(1)?;
                String::from_utf8(reader.bytes[reader.at..reader.at + len].to_vec())
                    .map_err(|_| "merge operator name is not UTF-8".into())
            };
            name = Some(decode().map_err(|what| {
                if what.is_empty() {
                    old_format(&path, offset)
                } else {
                    Error::corruption(&path, offset, format!("manifest frame: {what}"))
                }
            })?);
        }
        Ok(())
    })?;
    name.map(Some)
        .ok_or_else(|| Error::corruption(&path, 0, "manifest holds no snapshot"))
}

/// The store identity and merge operator's name in the snapshot that
/// starts manifest `number` (`bytes`, its file), and how many valid
/// frames follow it before the first bad one: what repair and recovery
/// need of a manifest they do not replay. `None` if its first frame is
/// no snapshot of this format.
pub fn snapshot_head(number: u64, bytes: &[u8]) -> Option<(u64, String, usize)> {
    let mut head = None;
    let mut frames = 0;
    let _ = spillway_core::log::read_frames(Path::new(""), number, bytes, |_, payload| {
        if head.is_none() {
            let mut reader = Reader {
                bytes: payload,
                at: 0,
            };
            let mut decode = || -> Result<(u64, String), String> {
                if reader.u8()? != TAG_SNAPSHOT {
                    return Err(String::new());
                }
                let store_id = reader.snapshot_head()?;
                reader.counters()?;
                let len = reader.count(1)?;
                let name = String::from_utf8(reader.bytes[reader.at..reader.at + len].to_vec())
                    .map_err(|_| String::new())?;
                Ok((store_id, name))
            };
            head = Some(decode().map_err(|_| Error::Internal(String::new()))?);
        }
        frames += 1;
        Ok(())
    });
    head.map(|(store_id, name)| (store_id, name, frames))
}

/// Reads the manifest CURRENT names and opens the list files its tree
/// refers to with `open_file` (given the store's identity). `None` for a
/// directory without CURRENT.
pub fn recover(
    fs: &dyn Fs,
    dir: &Path,
    mut open_file: impl FnMut(FileNumber, u64) -> Result<Arc<ListFile>>,
) -> Result<Option<Recovered>> {
    let Some(number) = current(fs, dir)? else {
        return Ok(None);
    };
    let path = dir.join(file_name(number));
    if !fs.exists(&path)? {
        return Err(Error::corruption(
            dir.join(CURRENT),
            0,
            format!("names {}, which is missing", path.display()),
        ));
    }
    let mut nodes: HashMap<NodeId, NodeRecord> = HashMap::new();
    let mut counters = None;
    let mut merge_name = None;
    let mut store_id = 0;
    let mut snapshot_bytes = 0;
    let manifest_end = read_log(fs, &path, number, |offset, payload| {
        let corrupt = |what: String| Error::corruption(&path, offset, format!("manifest frame: {what}"));
        let mut reader = Reader {
            bytes: payload,
            at: 0,
        };
        let tag = reader.u8().map_err(corrupt)?;
        match (tag, merge_name.is_some()) {
            (TAG_SNAPSHOT, false) => {}
            (TAG_EDIT, true) => {}
            (TAG_SNAPSHOT_V1, false) => return Err(old_format(&path, offset)),
            (TAG_SNAPSHOT, true) => return Err(corrupt("a second snapshot".into())),
            (TAG_EDIT, false) => return Err(corrupt("an edit before the snapshot".into())),
            (TAG_EDIT_V1, _) => return Err(corrupt("an edit of store format 1".into())),
            (other, _) => return Err(corrupt(format!("unknown tag {other}"))),
        }
        let mut decode = || -> Result<(), String> {
            if tag == TAG_SNAPSHOT {
                store_id = reader.snapshot_head()?;
            }
            counters = Some(reader.counters()?);
            if tag == TAG_SNAPSHOT {
                let len = reader.count(1)?;
                let name = &reader.bytes[reader.at..reader.at + len];
                reader.at += len;
                merge_name =
                    Some(String::from_utf8(name.to_vec()).map_err(|_| "merge operator name is not UTF-8")?);
                snapshot_bytes = payload.len() as u64;
            }
            for _ in 0..reader.count(1)? {
                let id = reader.varint()?;
                nodes
                    .remove(&id)
                    .ok_or(format!("removes node {id}, which does not exist"))?;
            }
            for _ in 0..reader.count(20)? {
                let node = reader.node()?;
                nodes.insert(node.id, node);
            }
            if reader.at != payload.len() {
                return Err(format!("{} bytes after the last node", payload.len() - reader.at));
            }
            Ok(())
        };
        decode().map_err(corrupt)
    })?;
    let (Some(counters), Some(merge_name)) = (counters, merge_name) else {
        return Err(Error::corruption(&path, 0, "manifest holds no snapshot"));
    };
    if !manifest_end.padded_crash_tail() {
        return Err(Error::corruption(
            &path,
            manifest_end.end,
            format!(
                "the manifest ends at byte {} of {} without the zeros that follow its last edit even after a crash: \
                 it was cut short or replaced, and edits it lost may name files that are still needed \
                 (run `spillway kv repair` to rebuild it from the files)",
                manifest_end.end, manifest_end.len
            ),
        ));
    }
    let mut files: HashMap<FileNumber, Arc<ListFile>> = HashMap::new();
    let mut tree_nodes = Vec::with_capacity(nodes.len());
    for record in nodes.into_values() {
        let mut node = Node::new(record.id, record.low, record.high);
        node.fast_splits = record.fast_splits;
        node.children = record.children;
        for list in record.lists {
            if list.file >= counters.next_file {
                return Err(Error::corruption(
                    &path,
                    0,
                    format!("list file {} beyond next file {}", list.file, counters.next_file),
                ));
            }
            let file = match files.get(&list.file) {
                Some(file) => file.clone(),
                None => {
                    let file = open_file(list.file, store_id)?;
                    files.insert(list.file, file.clone());
                    file
                }
            };
            if list.first_block >= list.end_block || list.end_block > file.blocks() {
                return Err(Error::corruption(
                    &path,
                    0,
                    format!(
                        "node {} names blocks {}..{} of list {}, which has {}",
                        record.id,
                        list.first_block,
                        list.end_block,
                        list.file,
                        file.blocks()
                    ),
                ));
            }
            node.lists.push(ListRef {
                file,
                first_block: list.first_block,
                end_block: list.end_block,
                low: list.low,
                high: list.high,
            });
        }
        tree_nodes.push(node);
    }
    let tree = Tree::from_nodes(tree_nodes);
    tree.check_invariants()
        .map_err(|error| Error::corruption(&path, 0, format!("the tree it describes is broken: {error}")))?;
    Ok(Some(Recovered {
        tree,
        counters,
        merge_name,
        store_id,
        manifest_number: number,
        manifest_end,
        snapshot_bytes,
    }))
}

/// The manifest being appended to.
#[derive(Debug)]
pub struct ManifestWriter {
    log: LogWriter,
    snapshot_bytes: u64,
}

impl ManifestWriter {
    /// Writes manifest `number` in `dir` holding `snapshot` alone, makes it
    /// durable and points CURRENT at it.
    pub fn create(fs: &dyn Fs, dir: &Path, number: u64, snapshot: &[u8]) -> Result<ManifestWriter> {
        let mut log = LogWriter::create(fs, &dir.join(file_name(number)), number)?.padded(0);
        log.append(snapshot)?;
        log.sync_all()?;
        fs.sync_dir(dir)?;
        let temporary = dir.join(CURRENT_TEMPORARY);
        let file = fs.create_or_truncate(&temporary)?;
        file.write_at(format!("{}\n", file_name(number)).as_bytes(), 0)?;
        file.sync_data()?;
        drop(file);
        fs.rename(&temporary, &dir.join(CURRENT))?;
        fs.sync_dir(dir)?;
        Ok(ManifestWriter {
            log,
            snapshot_bytes: snapshot.len() as u64,
        })
    }

    /// Appends to the manifest `recovered` was read from (a torn edit at
    /// its end becomes padding).
    pub fn reopen(fs: &dyn Fs, dir: &Path, recovered: &Recovered) -> Result<ManifestWriter> {
        let number = recovered.manifest_number;
        let file = fs.open_read_write(&dir.join(file_name(number)))?;
        Ok(ManifestWriter {
            log: LogWriter::reopen_padded(file, number, recovered.manifest_end)?,
            snapshot_bytes: recovered.snapshot_bytes,
        })
    }

    /// Appends an edit and makes it durable.
    pub fn append(&mut self, payload: &[u8]) -> Result<()> {
        self.log.append(payload)?;
        self.log.sync_all()
    }

    /// The manifest's number.
    pub fn number(&self) -> u64 {
        self.log.number()
    }

    /// Whether it has grown enough to be rewritten from a snapshot.
    pub fn wants_rewrite(&self) -> bool {
        let written = self.log.written();
        written > REWRITE_BYTES_MIN && written > 4 * self.snapshot_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use spillway_core::{ErrorKind, SimFs};

    fn counters() -> Counters {
        Counters {
            next_file: 10,
            next_node: 3,
            log_number: 4,
            log_seq: 100,
            newest_log: 5,
            closed_seq: None,
        }
    }

    #[test]
    fn a_manifest_replays_its_snapshot_and_edits() {
        let fs = SimFs::new();
        let dir = Path::new("/kv");
        fs.create_dir_all(dir).unwrap();
        assert!(recover(&fs, dir, |_, _| unreachable!()).unwrap().is_none());
        let tree = Tree::empty();
        let mut snapshot = Vec::new();
        encode_snapshot(&tree, 77, counters(), "aggregate:sum", &mut snapshot);
        let mut writer = ManifestWriter::create(&fs, dir, 7, &snapshot).unwrap();
        let mut root = (**tree.root()).clone();
        root.children.push(Child { low: 1 << 63, id: 2 });
        let edit = Edit {
            nodes: vec![
                root,
                Node::new(1, 0, (1 << 63) - 1),
                Node::new(2, 1 << 63, u64::MAX),
            ],
            removed: Vec::new(),
        };
        let mut payload = Vec::new();
        let later = Counters {
            next_node: 5,
            closed_seq: Some(150),
            ..counters()
        };
        encode_edit(&edit, later, &mut payload);
        writer.append(&payload).unwrap();
        let recovered = recover(&fs, dir, |_, _| unreachable!()).unwrap().unwrap();
        assert_eq!(recovered.counters, later);
        assert_eq!(recovered.merge_name, "aggregate:sum");
        assert_eq!(recovered.store_id, 77);
        assert_eq!(recovered.manifest_number, 7);
        assert_eq!(recovered.tree.leaves(), vec![1, 2]);
        assert_eq!(merge_name(&fs, dir).unwrap().as_deref(), Some("aggregate:sum"));

        // A torn last edit (its end never written) is not part of the manifest.
        let file = fs.open_read_write(&dir.join(file_name(7))).unwrap();
        let end = recovered.manifest_end.end;
        file.write_at(&[0xff; 3], end - 3).unwrap();
        let recovered = recover(&fs, dir, |_, _| unreachable!()).unwrap().unwrap();
        assert_eq!(recovered.tree.leaves(), vec![1]);
        assert_eq!(recovered.counters, counters());
        let mut writer = ManifestWriter::reopen(&fs, dir, &recovered).unwrap();
        writer.append(&payload).unwrap();
        assert_eq!(
            recover(&fs, dir, |_, _| unreachable!())
                .unwrap()
                .unwrap()
                .tree
                .leaves(),
            vec![1, 2]
        );
    }

    #[test]
    fn damaged_manifests_are_corruption_naming_the_file() {
        let fs = SimFs::new();
        let dir = Path::new("/kv");
        fs.create_dir_all(dir).unwrap();
        let file = fs.create(&dir.join(CURRENT)).unwrap();
        file.write_at(b"MANIFEST-000001\n", 0).unwrap();
        let error = recover(&fs, dir, |_, _| unreachable!()).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Corruption);
        assert!(error.to_string().contains("which is missing"), "{error}");
        file.write_at(b"garbage!!!!!!!!!", 0).unwrap();
        let error = recover(&fs, dir, |_, _| unreachable!()).unwrap_err();
        assert!(error.to_string().contains("CURRENT"), "{error}");

        // An edit that removes a node the tree never had.
        let mut snapshot = Vec::new();
        encode_snapshot(&Tree::empty(), 77, counters(), "", &mut snapshot);
        let mut writer = ManifestWriter::create(&fs, dir, 8, &snapshot).unwrap();
        let mut payload = Vec::new();
        encode_edit(
            &Edit {
                nodes: Vec::new(),
                removed: vec![42],
            },
            counters(),
            &mut payload,
        );
        writer.append(&payload).unwrap();
        writer.append(b"\x02more").unwrap();
        let error = recover(&fs, dir, |_, _| unreachable!()).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Corruption);
        assert!(error.to_string().contains("MANIFEST-000008"), "{error}");
        assert!(error.to_string().contains("removes node 42"), "{error}");
    }

    #[test]
    fn a_manifest_cut_short_is_corruption_not_a_torn_tail() {
        let fs = SimFs::new();
        let dir = Path::new("/kv");
        fs.create_dir_all(dir).unwrap();
        let mut snapshot = Vec::new();
        encode_snapshot(&Tree::empty(), 77, counters(), "", &mut snapshot);
        let mut writer = ManifestWriter::create(&fs, dir, 9, &snapshot).unwrap();
        let mut payload = Vec::new();
        encode_edit(&Edit::default(), counters(), &mut payload);
        for _ in 0..10 {
            writer.append(&payload).unwrap();
        }
        let recovered = recover(&fs, dir, |_, _| unreachable!()).unwrap().unwrap();
        assert!(recovered.manifest_end.padded_crash_tail());
        let path = dir.join(file_name(9));
        let file = fs.open_read_write(&path).unwrap();
        for cut in [recovered.manifest_end.end, recovered.manifest_end.end / 2] {
            file.set_len(cut).unwrap();
            let error = recover(&fs, dir, |_, _| unreachable!()).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::Corruption);
            assert!(error.to_string().contains("MANIFEST-000009"), "{error}");
            assert!(error.to_string().contains("cut short or replaced"), "{error}");
        }
        let mut bytes = Vec::new();
        file.read_exact_append(&mut bytes, file.len().unwrap() as usize, 0)
            .unwrap();
        let (store_id, name, frames) = snapshot_head(9, &bytes).unwrap();
        assert_eq!((store_id, name.as_str()), (77, ""));
        assert!(frames >= 1);
    }

    #[test]
    fn a_store_of_the_first_format_is_named_as_such() {
        let fs = SimFs::new();
        let dir = Path::new("/kv");
        fs.create_dir_all(dir).unwrap();
        // A first-format snapshot: tag 1, three counters, no name, no nodes.
        let mut writer = ManifestWriter::create(&fs, dir, 1, &[1, 2, 2, 0, 0, 0, 0]).unwrap();
        writer.append(&[2, 2, 2, 0, 0, 0]).unwrap();
        let error = recover(&fs, dir, |_, _| unreachable!()).unwrap_err();
        assert!(error.to_string().contains("store format 1"), "{error}");
        let error = merge_name(&fs, dir).unwrap_err();
        assert!(error.to_string().contains("store format 1"), "{error}");
    }
}
