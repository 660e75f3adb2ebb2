//! [`SimFs`]: an in-memory simulated file system for crash and fault tests,
//! in the spirit of LevelDB's fault-injection Env and TigerBeetle's simulated
//! storage. It implements the rules of the `fs` module documentation
//! exactly. The model is documented on [`SimFs`].

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::{
    allocate_context, append_context, check_direct_alignment, create_dir_context, exists_context,
    len_context, list_dir_context, read_context, remove_context, remove_dir_context, rename_context,
    set_len_context, short_read, sync_data_context, sync_dir_context, write_context, writeback_context,
    Creation, Fs, FsFile, OpenOptions,
};
use crate::sync;
use crate::{Error, IoContext, Result};

/// The sector size at which [`TearGranularity::Sector`] cuts torn writes.
pub const SECTOR_BYTES: u64 = 512;

/// The largest file SimFs holds; writes beyond fail with EFBIG so a bad
/// offset in a test fails cleanly instead of exhausting memory.
pub const SIM_FILE_BYTES_MAX: u64 = 1 << 30;

/// The block size of the space that a write failing with an injected ENOSPC
/// still fills (see [`Fault`]).
const ENOSPC_BLOCK_BYTES: u64 = 4096;

/// The kind of an operation, for counting and for aiming faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// An open that may create or truncate ([`Creation`] other than
    /// `OpenExisting`).
    Create,
    /// An open of an existing file.
    Open,
    /// `read_at` or `read_exact_at`.
    Read,
    /// `write_at` or `append`.
    Write,
    /// `set_len`.
    SetLen,
    /// `allocate` with a non-zero length.
    Allocate,
    /// `sync_data`.
    SyncData,
    /// `sync_dir`.
    SyncDir,
    /// `rename`.
    Rename,
    /// `remove_file`.
    Remove,
    /// `create_dir_all`.
    CreateDir,
    /// `list_dir`.
    ListDir,
    /// `exists`, `file_len` and a handle's `len`.
    Stat,
}

impl OpKind {
    /// Whether the operation changes the file system (so a full disk or a
    /// read-only remount refuses it).
    pub fn is_mutation(self) -> bool {
        !matches!(self, OpKind::Open | OpKind::Read | OpKind::ListDir | OpKind::Stat)
    }
}

/// Which operations a [`Fault`] counts and fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultTarget {
    /// Every operation.
    All,
    /// Operations that change the file system ([`OpKind::is_mutation`]):
    /// a full disk still reads.
    Mutations,
    /// Operations of one kind only, e.g. the third `sync_data`.
    Kind(OpKind),
}

impl FaultTarget {
    fn matches(self, kind: OpKind) -> bool {
        match self {
            FaultTarget::All => true,
            FaultTarget::Mutations => kind.is_mutation(),
            FaultTarget::Kind(target) => target == kind,
        }
    }
}

/// A failure to inject with [`SimFs::fail_after`].
///
/// A failed operation changes nothing, with one exception that real disks
/// share: a write failing with ENOSPC first fills every whole 4096-byte
/// block of the file it covers before its last block (a write inside one
/// block writes nothing), as a `pwrite` that was short when the disk filled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fault {
    /// The error number the operation fails with (`libc::EIO`,
    /// `libc::ENOSPC`); it is the [`Error::raw_os_error`] of the error.
    pub errno: i32,
    /// `false`: only the chosen operation fails (a transient error);
    /// `true`: it and every later targeted operation fail until
    /// [`SimFs::clear_fault`] (a dead disk, a full disk).
    pub persistent: bool,
    /// The operations that are counted towards the fault and that fail.
    pub target: FaultTarget,
}

impl Fault {
    /// One failure of any operation with `errno`.
    pub fn once(errno: i32) -> Self {
        Fault {
            errno,
            persistent: false,
            target: FaultTarget::All,
        }
    }

    /// Failure of every operation with `errno` from the chosen one on.
    pub fn for_good(errno: i32) -> Self {
        Fault {
            persistent: true,
            ..Fault::once(errno)
        }
    }

    /// This fault, aimed at `target` only.
    pub fn on(self, target: FaultTarget) -> Self {
        Fault { target, ..self }
    }
}

/// Where [`CrashMode::TearUnsynced`] may cut a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TearGranularity {
    /// At any byte: the harshest model, no atomicity at all.
    Byte,
    /// At file offsets that are multiples of [`SECTOR_BYTES`], the atomic
    /// unit most disks promise.
    Sector,
}

/// What survives a [`SimFs::crash`] of the data and directory entries that
/// were not synced. Synced state always survives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// Power loss with nothing flushed: every unsynced write, length change
    /// and directory change is lost.
    DropUnsynced,
    /// Power loss mid-flush. For every file, a random prefix (in issue
    /// order) of its unsynced operations survives, and the first operation
    /// not kept, if a write, survives in part half of the time: its first
    /// bytes up to a random cut at `granularity` (possibly none). Every directory independently keeps a random prefix
    /// of its unsynced entry changes (a rename inside one directory is one
    /// change). Deterministic for a given `seed`. (A real disk may also
    /// reorder writes; this model does not.)
    TearUnsynced {
        /// Seed of the random choices.
        seed: u64,
        /// Where a write may be cut.
        granularity: TearGranularity,
    },
    /// The process dies but the kernel survives: nothing written is lost,
    /// but what was not synced is still not durable.
    ProcessExit,
}

/// Counters that tests read to check what an engine did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Operations attempted on the file system and its handles (failed ones
    /// included; calls refused for bad arguments or stale handles excluded).
    pub operations: u64,
    /// Bytes returned by reads.
    pub read_bytes: u64,
    /// Bytes written by `write_at` and `append` (including the part written
    /// by a write failing with ENOSPC).
    pub write_bytes: u64,
    /// Successful `sync_data` calls.
    pub sync_data_count: u64,
    /// Successful `sync_dir` calls.
    pub sync_dir_count: u64,
    /// Of `write_bytes`, those written through O_DIRECT handles.
    pub direct_write_bytes: u64,
    /// `start_writeback` calls (hints only: they make nothing durable).
    pub writeback_hints: u64,
    /// Operations failed by an injected fault.
    pub faults_injected: u64,
    /// Calls of [`SimFs::crash`].
    pub crashes: u64,
}

/// An in-memory file system with volatile and durable state that can crash
/// and fail operations on demand, for crash and fault tests of engines.
///
/// # Model
///
/// ```text
///   directory  volatile entries ─┐ sync_dir      file  volatile image ─┐ sync_data
///   "/db"      (name -> file id) ├──────────►    #7    (what reads see) ├──────────►
///              unsynced dir ops ─┘ durable             unsynced ops    ─┘ durable
///                                  entries                                image
/// ```
///
/// A file is an inode (a file id) with a volatile image, a durable image and
/// the log of operations (writes, length changes) made since its last
/// `sync_data`. A directory maps names to file ids, volatile and durable, and
/// logs the entry changes (create, rename, remove) made since its last
/// `sync_dir`. [`SimFs::crash`] rebuilds the volatile state from the durable
/// state plus, depending on the [`CrashMode`], none, all or a random prefix
/// of the logged operations.
///
/// Simplifications: directories themselves are durable as soon as
/// `create_dir_all` returns and cannot be renamed or removed; paths are
/// plain keys (`.` components are dropped, `..` is refused, no symlinks or
/// hard links); a file may not grow past [`SIM_FILE_BYTES_MAX`] (EFBIG).
///
/// Cloning gives another handle on the same file system, so a test keeps one
/// to crash it while the engine holds an `Arc<dyn Fs>` of another.
///
/// ```
/// use std::path::Path;
/// use spillway_core::fs::{CrashMode, Fault, Fs, SimFs};
///
/// let sim = SimFs::new();
/// sim.create_dir_all(Path::new("/db")).unwrap();
/// let file = sim.create(Path::new("/db/CURRENT")).unwrap();
/// file.write_at(b"MANIFEST-000001", 0).unwrap();
/// file.sync_data().unwrap();
/// // The data is durable but the name is not: the directory was not synced.
/// sim.crash(CrashMode::DropUnsynced);
/// assert!(!sim.exists(Path::new("/db/CURRENT")).unwrap());
///
/// // The next operation fails with EIO, once.
/// sim.fail_after(0, Fault::once(libc::EIO));
/// let error = sim.create(Path::new("/db/CURRENT")).unwrap_err();
/// assert_eq!(error.raw_os_error(), Some(libc::EIO));
/// assert!(sim.create(Path::new("/db/CURRENT")).is_ok());
/// ```
///
/// # Thread safety
/// All state is behind one mutex: every operation is atomic and the fault
/// counter sees operations in one total order.
#[derive(Clone, Default)]
pub struct SimFs {
    state: Arc<Mutex<State>>,
}

impl fmt::Debug for SimFs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = lock(&self.state);
        f.debug_struct("SimFs")
            .field("files", &state.files.len())
            .field("directories", &state.dirs.len())
            .field("epoch", &state.epoch)
            .field("stats", &state.stats)
            .finish_non_exhaustive()
    }
}

impl SimFs {
    /// An empty file system with the directories `/` and `` (the current
    /// directory of relative paths).
    pub fn new() -> Self {
        SimFs::default()
    }

    /// Simulates a crash: every handle becomes stale (its operations fail),
    /// and what was not synced is dropped, torn or kept as `mode` says.
    /// Faults stay armed; see [`SimFs::clear_fault`].
    pub fn crash(&self, mode: CrashMode) {
        lock(&self.state).crash(mode);
    }

    /// Makes the operation after the next `operations` targeted ones fail
    /// with `fault.errno` (`fail_after(0, ..)` fails the very next one).
    /// Replaces any earlier fault.
    pub fn fail_after(&self, operations: u64, fault: Fault) {
        let mut state = lock(&self.state);
        state.armed = Some(ArmedFault {
            remaining: operations,
            fault,
        });
        state.failing = None;
    }

    /// Disarms the fault and ends a persistent failure: the disk works again.
    pub fn clear_fault(&self) {
        let mut state = lock(&self.state);
        state.armed = None;
        state.failing = None;
    }

    /// The counters so far.
    pub fn stats(&self) -> SimStats {
        lock(&self.state).stats
    }
}

type FileId = u64;

struct State {
    files: BTreeMap<FileId, Inode>,
    dirs: BTreeMap<PathBuf, Directory>,
    next_file_id: FileId,
    /// Incremented by every crash; handles of an older epoch are stale.
    epoch: u64,
    armed: Option<ArmedFault>,
    /// A persistent fault that has fired.
    failing: Option<Fault>,
    stats: SimStats,
}

impl Default for State {
    fn default() -> Self {
        let dirs = [PathBuf::from("/"), PathBuf::new()]
            .into_iter()
            .map(|path| (path, Directory::default()))
            .collect();
        State {
            files: BTreeMap::new(),
            dirs,
            next_file_id: 1,
            epoch: 0,
            armed: None,
            failing: None,
            stats: SimStats::default(),
        }
    }
}

struct ArmedFault {
    remaining: u64,
    fault: Fault,
}

#[derive(Default)]
struct Inode {
    volatile: Vec<u8>,
    durable: Vec<u8>,
    /// Operations since the last `sync_data`; applied in order to `durable`
    /// they give `volatile`.
    unsynced: Vec<FileOp>,
    open_handles: usize,
    /// Volatile directory entries naming this file.
    volatile_links: usize,
}

enum FileOp {
    Write { offset: usize, data: Vec<u8> },
    SetLen(usize),
}

impl FileOp {
    fn apply(&self, image: &mut Vec<u8>) {
        match self {
            FileOp::Write { offset, data } => write_into(image, *offset, data),
            FileOp::SetLen(len) => image.resize(*len, 0),
        }
    }
}

fn write_into(image: &mut Vec<u8>, offset: usize, data: &[u8]) {
    let end = offset + data.len();
    if image.len() < end {
        image.resize(end, 0);
    }
    image[offset..end].copy_from_slice(data);
}

#[derive(Default)]
struct Directory {
    volatile: BTreeMap<String, FileId>,
    durable: BTreeMap<String, FileId>,
    /// Entry changes since the last `sync_dir`, each applied atomically.
    unsynced: Vec<DirOp>,
}

/// One atomic change of a directory: `(name, Some(file))` links, `(name,
/// None)` unlinks.
struct DirOp {
    changes: Vec<(String, Option<FileId>)>,
}

impl DirOp {
    fn apply(&self, entries: &mut BTreeMap<String, FileId>) {
        for (name, file) in &self.changes {
            match file {
                Some(file) => entries.insert(name.clone(), *file),
                None => entries.remove(name),
            };
        }
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // Every mutation completes under the lock without panicking in between,
    // so a poisoned lock still guards consistent state; recovering it keeps
    // a test's panic from turning into an abort in `SimFile::drop`.
    sync::lock(state)
}

fn os_error(errno: i32) -> io::Error {
    io::Error::from_raw_os_error(errno)
}

/// The path as a key: `.` components dropped, `..` refused, UTF-8 only.
fn normalize(path: &Path) -> Result<PathBuf> {
    let mut key = PathBuf::new();
    for component in path.components() {
        match component {
            Component::RootDir => key.push("/"),
            Component::CurDir => {}
            Component::Normal(name) if name.to_str().is_some() => key.push(name),
            _ => crate::bail!(
                InvalidArgument,
                "SimFs path {} has a component it does not model ({component:?}); use plain \
                 UTF-8 names without '..'",
                path.display()
            ),
        }
    }
    Ok(key)
}

/// The key of the parent directory and the file's name.
fn split(path: &Path) -> Result<(PathBuf, String)> {
    let key = normalize(path)?;
    match (key.parent(), key.file_name().and_then(|name| name.to_str())) {
        (Some(parent), Some(name)) => Ok((parent.to_path_buf(), name.to_owned())),
        _ => crate::bail!(
            InvalidArgument,
            "SimFs path {} names a directory, not a file",
            path.display()
        ),
    }
}

/// A small deterministic generator (SplitMix64) for the crash choices.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..bound`; `bound` > 0.
    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

/// How many bytes of a write of `len` bytes at `offset` a tear keeps:
/// strictly fewer than `len`, ending at a cut allowed by `granularity`.
fn torn_len(offset: u64, len: u64, granularity: TearGranularity, rng: &mut SplitMix64) -> u64 {
    if len == 0 {
        return 0;
    }
    match granularity {
        TearGranularity::Byte => rng.below(len),
        TearGranularity::Sector => {
            let end = offset + len;
            let first_cut = (offset / SECTOR_BYTES + 1) * SECTOR_BYTES;
            if first_cut >= end {
                return 0;
            }
            let cuts = (end - 1 - first_cut) / SECTOR_BYTES + 1;
            match rng.below(cuts + 1) {
                0 => 0,
                index => first_cut + (index - 1) * SECTOR_BYTES - offset,
            }
        }
    }
}

/// The bytes of a `len`-byte write at `offset` that land before an injected
/// ENOSPC: the whole blocks it covers before its last block.
fn enospc_prefix_len(offset: u64, len: u64) -> u64 {
    if len == 0 {
        return 0;
    }
    let last_block_start = (offset + len - 1) / ENOSPC_BLOCK_BYTES * ENOSPC_BLOCK_BYTES;
    last_block_start.saturating_sub(offset)
}

impl State {
    /// Counts an operation and fails it if a fault says so.
    fn begin(&mut self, kind: OpKind) -> io::Result<()> {
        self.stats.operations += 1;
        if let Some(fault) = self.failing {
            if fault.target.matches(kind) {
                self.stats.faults_injected += 1;
                return Err(os_error(fault.errno));
            }
        }
        let Some(armed) = &mut self.armed else {
            return Ok(());
        };
        if !armed.fault.target.matches(kind) {
            return Ok(());
        }
        if armed.remaining > 0 {
            armed.remaining -= 1;
            return Ok(());
        }
        let fault = armed.fault;
        self.armed = None;
        if fault.persistent {
            self.failing = Some(fault);
        }
        self.stats.faults_injected += 1;
        Err(os_error(fault.errno))
    }

    fn check_epoch(&self, epoch: u64) -> io::Result<()> {
        if epoch == self.epoch {
            Ok(())
        } else {
            Err(io::Error::other(
                "stale handle: the simulated machine crashed after this file was opened",
            ))
        }
    }

    fn inode(&mut self, file: FileId) -> &mut Inode {
        self.files
            .get_mut(&file)
            .expect("an open handle keeps its inode alive")
    }

    fn directory(&self, key: &Path) -> io::Result<&Directory> {
        self.dirs.get(key).ok_or_else(|| self.missing_dir_error(key))
    }

    fn directory_mut(&mut self, key: &Path) -> io::Result<&mut Directory> {
        let error = self.missing_dir_error(key);
        self.dirs.get_mut(key).ok_or(error)
    }

    /// ENOTDIR if a file has the directory's name, ENOENT otherwise.
    fn missing_dir_error(&self, key: &Path) -> io::Error {
        if self.file_at(key).is_some() {
            os_error(libc::ENOTDIR)
        } else {
            os_error(libc::ENOENT)
        }
    }

    /// The file with this key, if any.
    fn file_at(&self, key: &Path) -> Option<FileId> {
        let parent = key.parent()?;
        let name = key.file_name()?.to_str()?;
        self.dirs.get(parent)?.volatile.get(name).copied()
    }

    fn open(&mut self, dir: &Path, name: &str, creation: Creation) -> io::Result<FileId> {
        if self.dirs.contains_key(&dir.join(name)) {
            return Err(os_error(libc::EISDIR));
        }
        let existing = self.directory(dir)?.volatile.get(name).copied();
        let file = match (existing, creation) {
            (Some(_), Creation::CreateNew) => return Err(os_error(libc::EEXIST)),
            (None, Creation::OpenExisting) => return Err(os_error(libc::ENOENT)),
            (Some(file), Creation::CreateOrTruncate) => {
                self.inode(file).set_len(0);
                file
            }
            (Some(file), _) => file,
            (None, _) => {
                let file = self.next_file_id;
                self.next_file_id += 1;
                self.files.insert(
                    file,
                    Inode {
                        volatile_links: 1,
                        ..Inode::default()
                    },
                );
                let directory = self.directory_mut(dir)?;
                directory.volatile.insert(name.to_owned(), file);
                directory.unsynced.push(DirOp {
                    changes: vec![(name.to_owned(), Some(file))],
                });
                file
            }
        };
        self.inode(file).open_handles += 1;
        Ok(file)
    }

    fn rename(&mut self, from: (&Path, &str), to: (&Path, &str)) -> io::Result<()> {
        let (from_dir, from_name) = from;
        let (to_dir, to_name) = to;
        if self.dirs.contains_key(&from_dir.join(from_name)) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "SimFs does not rename directories",
            ));
        }
        let file = self
            .directory(from_dir)?
            .volatile
            .get(from_name)
            .copied()
            .ok_or_else(|| os_error(libc::ENOENT))?;
        self.directory(to_dir)?;
        if self.dirs.contains_key(&to_dir.join(to_name)) {
            return Err(os_error(libc::EISDIR));
        }
        if from == to {
            return Ok(());
        }
        let replaced = self
            .directory_mut(to_dir)?
            .volatile
            .insert(to_name.to_owned(), file);
        if let Some(replaced) = replaced {
            self.inode(replaced).volatile_links -= 1;
        }
        let unlink = (from_name.to_owned(), None);
        let link = (to_name.to_owned(), Some(file));
        if from_dir == to_dir {
            let directory = self.directory_mut(from_dir)?;
            directory.volatile.remove(from_name);
            directory.unsynced.push(DirOp {
                changes: vec![unlink, link],
            });
        } else {
            self.directory_mut(to_dir)?
                .unsynced
                .push(DirOp { changes: vec![link] });
            let directory = self.directory_mut(from_dir)?;
            directory.volatile.remove(from_name);
            directory.unsynced.push(DirOp {
                changes: vec![unlink],
            });
        }
        self.collect_garbage();
        Ok(())
    }

    fn remove(&mut self, dir: &Path, name: &str) -> io::Result<()> {
        if self.dirs.contains_key(&dir.join(name)) {
            return Err(os_error(libc::EISDIR));
        }
        let directory = self.directory_mut(dir)?;
        let file = directory
            .volatile
            .remove(name)
            .ok_or_else(|| os_error(libc::ENOENT))?;
        directory.unsynced.push(DirOp {
            changes: vec![(name.to_owned(), None)],
        });
        self.inode(file).volatile_links -= 1;
        self.collect_garbage();
        Ok(())
    }

    fn create_dir_all(&mut self, key: &Path) -> io::Result<()> {
        let ancestors: Vec<&Path> = key.ancestors().collect();
        for ancestor in ancestors.into_iter().rev() {
            if self.dirs.contains_key(ancestor) {
                continue;
            }
            if self.file_at(ancestor).is_some() {
                let errno = if ancestor == key {
                    libc::EEXIST
                } else {
                    libc::ENOTDIR
                };
                return Err(os_error(errno));
            }
            self.dirs.insert(ancestor.to_path_buf(), Directory::default());
        }
        Ok(())
    }

    /// Removes an empty directory (no files, no subdirectories). Directory
    /// entries of directories are not modelled as durable state, so the
    /// removal takes effect at once.
    fn remove_dir(&mut self, key: &Path) -> io::Result<()> {
        let directory = self.directory(key)?;
        let has_subdirectories = self.dirs.keys().any(|path| path.parent() == Some(key));
        if !directory.volatile.is_empty() || has_subdirectories {
            return Err(os_error(libc::ENOTEMPTY));
        }
        self.dirs.remove(key);
        Ok(())
    }

    fn list_dir(&self, key: &Path) -> io::Result<Vec<String>> {
        let mut names: BTreeSet<String> = self.directory(key)?.volatile.keys().cloned().collect();
        for path in self.dirs.keys() {
            if path.parent() == Some(key) {
                if let Some(name) = path.file_name().and_then(|name| name.to_str()) {
                    names.insert(name.to_owned());
                }
            }
        }
        Ok(names.into_iter().collect())
    }

    fn sync_dir(&mut self, key: &Path) -> io::Result<()> {
        let directory = self.directory_mut(key)?;
        directory.durable = directory.volatile.clone();
        directory.unsynced.clear();
        self.stats.sync_dir_count += 1;
        self.collect_garbage();
        Ok(())
    }

    /// Drops the inodes nothing can reach any more: no volatile entry, no
    /// open handle, no durable entry and no unsynced entry change (which a
    /// torn crash could still make durable).
    fn collect_garbage(&mut self) {
        let candidates: Vec<FileId> = self
            .files
            .iter()
            .filter(|(_, inode)| inode.volatile_links == 0 && inode.open_handles == 0)
            .map(|(&file, _)| file)
            .collect();
        if candidates.is_empty() {
            return;
        }
        let mut reachable = BTreeSet::new();
        for directory in self.dirs.values() {
            reachable.extend(directory.durable.values().copied());
            for op in &directory.unsynced {
                reachable.extend(op.changes.iter().filter_map(|(_, file)| *file));
            }
        }
        for file in candidates {
            if !reachable.contains(&file) {
                self.files.remove(&file);
            }
        }
    }

    fn crash(&mut self, mode: CrashMode) {
        self.epoch += 1;
        self.stats.crashes += 1;
        let (mut rng, tear) = match mode {
            CrashMode::ProcessExit => (SplitMix64(0), None),
            CrashMode::DropUnsynced => (SplitMix64(0), None),
            CrashMode::TearUnsynced { seed, granularity } => (SplitMix64(seed), Some(granularity)),
        };
        if mode != CrashMode::ProcessExit {
            for directory in self.dirs.values_mut() {
                let kept = match tear {
                    Some(_) => rng.below(directory.unsynced.len() as u64 + 1) as usize,
                    None => 0,
                };
                for op in &directory.unsynced[..kept] {
                    op.apply(&mut directory.durable);
                }
                directory.unsynced.clear();
                directory.volatile = directory.durable.clone();
            }
            for inode in self.files.values_mut() {
                if let Some(granularity) = tear {
                    inode.tear(granularity, &mut rng);
                }
                inode.unsynced.clear();
                inode.volatile = inode.durable.clone();
            }
        }
        for inode in self.files.values_mut() {
            inode.open_handles = 0;
            inode.volatile_links = 0;
        }
        let links: Vec<FileId> = self
            .dirs
            .values()
            .flat_map(|directory| directory.volatile.values().copied())
            .collect();
        for file in links {
            self.inode(file).volatile_links += 1;
        }
        self.collect_garbage();
    }
}

impl Inode {
    fn push(&mut self, op: FileOp) {
        op.apply(&mut self.volatile);
        self.unsynced.push(op);
    }

    fn write(&mut self, offset: u64, data: &[u8]) {
        // Callers checked the end against SIM_FILE_BYTES_MAX, so it fits usize.
        self.push(FileOp::Write {
            offset: offset as usize,
            data: data.to_vec(),
        });
    }

    fn set_len(&mut self, len: u64) {
        self.push(FileOp::SetLen(len as usize));
    }

    fn sync(&mut self) {
        for op in self.unsynced.drain(..) {
            op.apply(&mut self.durable);
        }
    }

    /// Makes a random prefix of the unsynced operations durable, the first
    /// one left out possibly in part.
    fn tear(&mut self, granularity: TearGranularity, rng: &mut SplitMix64) {
        let kept = rng.below(self.unsynced.len() as u64 + 1) as usize;
        for op in &self.unsynced[..kept] {
            op.apply(&mut self.durable);
        }
        // Half the time the first operation left out is torn, so both clean
        // prefixes and torn writes are common whatever the write sizes.
        let tear_next = rng.below(2) == 1;
        if let (true, Some(FileOp::Write { offset, data })) = (tear_next, self.unsynced.get(kept)) {
            let torn = torn_len(*offset as u64, data.len() as u64, granularity, rng) as usize;
            if torn > 0 {
                write_into(&mut self.durable, *offset, &data[..torn]);
            }
        }
    }
}

/// Fails with EFBIG if a file would grow past [`SIM_FILE_BYTES_MAX`].
fn check_end(offset: u64, len: u64) -> io::Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= SIM_FILE_BYTES_MAX => Ok(()),
        _ => Err(os_error(libc::EFBIG)),
    }
}

impl Fs for SimFs {
    fn open(&self, path: &Path, options: OpenOptions) -> Result<Box<dyn FsFile>> {
        options.validate(path)?;
        let (dir, name) = split(path)?;
        let kind = match options.creation {
            Creation::OpenExisting => OpKind::Open,
            _ => OpKind::Create,
        };
        let context = || options.describe(path);
        let mut state = lock(&self.state);
        state.begin(kind).io_context(context)?;
        let file = state.open(&dir, &name, options.creation).io_context(context)?;
        Ok(Box::new(SimFile {
            state: Arc::clone(&self.state),
            file,
            epoch: state.epoch,
            path: path.to_path_buf(),
            writable: options.write,
            direct: options.direct,
        }))
    }

    fn sync_dir(&self, path: &Path) -> Result<()> {
        let key = normalize(path)?;
        let context = || sync_dir_context(path);
        let mut state = lock(&self.state);
        state.begin(OpKind::SyncDir).io_context(context)?;
        state.sync_dir(&key).io_context(context)
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let (from_dir, from_name) = split(from)?;
        let (to_dir, to_name) = split(to)?;
        let context = || rename_context(from, to);
        let mut state = lock(&self.state);
        state.begin(OpKind::Rename).io_context(context)?;
        state
            .rename((&from_dir, &from_name), (&to_dir, &to_name))
            .io_context(context)
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        let (dir, name) = split(path)?;
        let context = || remove_context(path);
        let mut state = lock(&self.state);
        state.begin(OpKind::Remove).io_context(context)?;
        state.remove(&dir, &name).io_context(context)
    }

    fn create_dir_all(&self, path: &Path) -> Result<()> {
        let key = normalize(path)?;
        let context = || create_dir_context(path);
        let mut state = lock(&self.state);
        state.begin(OpKind::CreateDir).io_context(context)?;
        state.create_dir_all(&key).io_context(context)
    }

    fn list_dir(&self, path: &Path) -> Result<Vec<String>> {
        let key = normalize(path)?;
        let context = || list_dir_context(path);
        let mut state = lock(&self.state);
        state.begin(OpKind::ListDir).io_context(context)?;
        state.list_dir(&key).io_context(context)
    }

    fn exists(&self, path: &Path) -> Result<bool> {
        let key = normalize(path)?;
        let mut state = lock(&self.state);
        state.begin(OpKind::Stat).io_context(|| exists_context(path))?;
        Ok(state.dirs.contains_key(&key) || state.file_at(&key).is_some())
    }

    fn is_dir(&self, path: &Path) -> Result<bool> {
        let key = normalize(path)?;
        let mut state = lock(&self.state);
        state.begin(OpKind::Stat).io_context(|| exists_context(path))?;
        Ok(state.dirs.contains_key(&key))
    }

    fn remove_dir(&self, path: &Path) -> Result<()> {
        let key = normalize(path)?;
        let context = || remove_dir_context(path);
        let mut state = lock(&self.state);
        state.begin(OpKind::Remove).io_context(context)?;
        state.remove_dir(&key).io_context(context)
    }

    fn file_len(&self, path: &Path) -> Result<u64> {
        let (dir, name) = split(path)?;
        let context = || len_context(path);
        let mut state = lock(&self.state);
        state.begin(OpKind::Stat).io_context(context)?;
        if state.dirs.contains_key(&dir.join(&name)) {
            return Err(os_error(libc::EISDIR)).io_context(context);
        }
        let file = state
            .directory(&dir)
            .and_then(|directory| {
                directory
                    .volatile
                    .get(&name)
                    .copied()
                    .ok_or_else(|| os_error(libc::ENOENT))
            })
            .io_context(context)?;
        Ok(state.inode(file).volatile.len() as u64)
    }
}

/// A handle on a [`SimFs`] file. Stale after a crash.
struct SimFile {
    state: Arc<Mutex<State>>,
    file: FileId,
    /// The crash epoch the handle was opened in.
    epoch: u64,
    path: PathBuf,
    writable: bool,
    direct: bool,
}

impl fmt::Debug for SimFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimFile")
            .field("path", &self.path)
            .field("file", &self.file)
            .field("epoch", &self.epoch)
            .field("writable", &self.writable)
            .field("direct", &self.direct)
            .finish_non_exhaustive()
    }
}

impl Drop for SimFile {
    fn drop(&mut self) {
        let mut state = lock(&self.state);
        if state.epoch != self.epoch {
            return;
        }
        let inode = state.inode(self.file);
        inode.open_handles -= 1;
        if inode.open_handles == 0 && inode.volatile_links == 0 {
            state.collect_garbage();
        }
    }
}

impl SimFile {
    /// Locks the state after the checks a real file system makes before it
    /// touches the disk: the handle is live, and writable if `writes`.
    fn lock_live(&self, context: impl Fn() -> String, writes: bool) -> Result<MutexGuard<'_, State>> {
        let state = lock(&self.state);
        state.check_epoch(self.epoch).io_context(&context)?;
        if writes && !self.writable {
            return Err(os_error(libc::EBADF)).io_context(&context);
        }
        Ok(state)
    }

    /// On a direct handle, refuses a misaligned I/O as `RealFs` does.
    fn check_alignment(
        &self,
        context: impl Fn() -> String,
        address: usize,
        offset: u64,
        len: usize,
    ) -> Result<()> {
        if self.direct {
            check_direct_alignment(&context(), address, offset, len)?;
        }
        Ok(())
    }

    /// Writes `data` at `offset`, under the lock and after the checks;
    /// counts the operation and applies an injected fault.
    fn write_locked(&self, state: &mut State, data: &[u8], offset: u64) -> io::Result<()> {
        let fault = state.begin(OpKind::Write);
        check_end(offset, data.len() as u64)?;
        if let Err(error) = fault {
            if error.raw_os_error() == Some(libc::ENOSPC) {
                let written = enospc_prefix_len(offset, data.len() as u64) as usize;
                if written > 0 {
                    state.inode(self.file).write(offset, &data[..written]);
                    state.stats.write_bytes += written as u64;
                }
            }
            return Err(error);
        }
        state.inode(self.file).write(offset, data);
        state.stats.write_bytes += data.len() as u64;
        Ok(())
    }
}

impl FsFile for SimFile {
    fn path(&self) -> &Path {
        &self.path
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize> {
        let context = || read_context(&self.path, buf.len(), offset);
        let mut state = self.lock_live(context, false)?;
        self.check_alignment(context, buf.as_ptr() as usize, offset, buf.len())?;
        state.begin(OpKind::Read).io_context(context)?;
        let image = &state.inode(self.file).volatile;
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(image.len());
        let read = buf.len().min(image.len() - start);
        buf[..read].copy_from_slice(&image[start..start + read]);
        state.stats.read_bytes += read as u64;
        Ok(read)
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        let wanted = buf.len();
        let read = self.read_at(buf, offset)?;
        if read < wanted {
            return Err(short_read(&self.path, wanted, offset, read));
        }
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> Result<()> {
        let context = || write_context(&self.path, buf.len(), offset);
        let mut state = self.lock_live(context, true)?;
        self.check_alignment(context, buf.as_ptr() as usize, offset, buf.len())?;
        self.write_locked(&mut state, buf, offset).io_context(context)?;
        if self.direct {
            state.stats.direct_write_bytes += buf.len() as u64;
        }
        Ok(())
    }

    fn append(&self, buf: &[u8]) -> Result<u64> {
        let context = || append_context(&self.path, buf.len());
        let mut state = self.lock_live(context, true)?;
        let offset = state.inode(self.file).volatile.len() as u64;
        self.check_alignment(context, buf.as_ptr() as usize, offset, buf.len())?;
        self.write_locked(&mut state, buf, offset)
            .io_context(|| format!("{} at offset {offset}", context()))?;
        if self.direct {
            state.stats.direct_write_bytes += buf.len() as u64;
        }
        Ok(offset)
    }

    fn len(&self) -> Result<u64> {
        let context = || len_context(&self.path);
        let mut state = self.lock_live(context, false)?;
        state.begin(OpKind::Stat).io_context(context)?;
        Ok(state.inode(self.file).volatile.len() as u64)
    }

    fn set_len(&self, len: u64) -> Result<()> {
        let context = || set_len_context(&self.path, len);
        let mut state = self.lock_live(context, true)?;
        state.begin(OpKind::SetLen).io_context(context)?;
        check_end(len, 0).io_context(context)?;
        state.inode(self.file).set_len(len);
        Ok(())
    }

    fn sync_data(&self) -> Result<()> {
        let context = || sync_data_context(&self.path);
        let mut state = self.lock_live(context, false)?;
        state.begin(OpKind::SyncData).io_context(context)?;
        state.inode(self.file).sync();
        state.stats.sync_data_count += 1;
        Ok(())
    }

    fn start_writeback(&self) -> Result<()> {
        // A hint: the simulated disk keeps unsynced data volatile whatever
        // the kernel would have written back early (assumption 1).
        let context = || writeback_context(&self.path);
        let mut state = self.lock_live(context, false)?;
        state.stats.writeback_hints += 1;
        Ok(())
    }

    fn allocate(&self, offset: u64, len: u64) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let context = || allocate_context(&self.path, offset, len);
        let end = offset
            .checked_add(len)
            .ok_or_else(|| Error::InvalidArgument(format!("{}: the range overflows u64", context())))?;
        let mut state = self.lock_live(context, true)?;
        state.begin(OpKind::Allocate).io_context(context)?;
        check_end(offset, len).io_context(context)?;
        let inode = state.inode(self.file);
        if (inode.volatile.len() as u64) < end {
            inode.set_len(end);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sector_tears_cut_only_at_sector_boundaries() {
        let mut rng = SplitMix64(1);
        let mut seen = BTreeSet::new();
        for _ in 0..1000 {
            let kept = torn_len(100, 1500, TearGranularity::Sector, &mut rng);
            assert!(kept == 0 || (100 + kept).is_multiple_of(SECTOR_BYTES), "{kept}");
            assert!(kept < 1500);
            seen.insert(kept);
        }
        // Cuts at 512, 1024 and 1536: keeps 412, 924 or 1436 bytes, or none.
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), vec![0, 412, 924, 1436]);
        assert_eq!(torn_len(0, 512, TearGranularity::Sector, &mut rng), 0);
        assert_eq!(torn_len(10, 20, TearGranularity::Sector, &mut rng), 0);
    }

    #[test]
    fn byte_tears_keep_strictly_less_than_the_write() {
        let mut rng = SplitMix64(7);
        let lens: BTreeSet<u64> = (0..500)
            .map(|_| torn_len(3, 5, TearGranularity::Byte, &mut rng))
            .collect();
        assert_eq!(lens.into_iter().collect::<Vec<_>>(), vec![0, 1, 2, 3, 4]);
    }

    #[test]
    fn enospc_keeps_the_whole_blocks_before_the_last() {
        assert_eq!(enospc_prefix_len(0, 10_000), 8192);
        assert_eq!(enospc_prefix_len(0, 8192), 4096);
        assert_eq!(enospc_prefix_len(0, 4096), 0);
        assert_eq!(enospc_prefix_len(4000, 200), 96);
        assert_eq!(enospc_prefix_len(100, 50), 0);
        assert_eq!(enospc_prefix_len(0, 0), 0);
    }

    #[test]
    fn paths_are_normalized_keys() {
        assert_eq!(normalize(Path::new("/a/./b//c")).unwrap(), Path::new("/a/b/c"));
        assert_eq!(normalize(Path::new("./x")).unwrap(), Path::new("x"));
        assert_eq!(normalize(Path::new(".")).unwrap(), Path::new(""));
        assert!(normalize(Path::new("/a/../b")).is_err());
        assert_eq!(split(Path::new("x")).unwrap(), (PathBuf::new(), "x".to_owned()));
        assert!(split(Path::new("/")).is_err());
    }

    #[test]
    fn removed_files_are_collected_once_unreachable() {
        let fs = SimFs::new();
        let path = Path::new("/f");
        let file = fs.create(path).unwrap();
        file.write_at(b"data", 0).unwrap();
        fs.remove_file(path).unwrap();
        // Still open, and the unsynced link could survive a torn crash.
        assert_eq!(lock(&fs.state).files.len(), 1);
        drop(file);
        assert_eq!(lock(&fs.state).files.len(), 1);
        fs.sync_dir(Path::new("/")).unwrap();
        assert_eq!(lock(&fs.state).files.len(), 0);
    }
}
