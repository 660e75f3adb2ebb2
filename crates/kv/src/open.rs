//! Opening a store: recovery's checks, then the files they make redundant
//! removed, the logs replayed into the root buffer, a new log started and
//! recorded in the manifest, and the worker started; or a new store
//! created.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};

use spillway_core::{hash64, Error, Fs, Poison, RealFs, Result};

use crate::cache::FileCache;
use crate::list;
use crate::manifest::{self, Counters, ManifestWriter};
use crate::metrics::Metrics;
use crate::options::{Options, SyncMode};
use crate::recovery::{self, Checked};
use crate::root::RootBuffer;
use crate::shared::{Control, Shared, SpareLog, View, WorkerHandle, Writer};
use crate::tree::{Edit, Tree};
use crate::wal::{self, LogHeader, Wal};
use crate::worker;

/// Recovery (recovery.rs): checks that the manifest, the list files it
/// names and the chain of logs account for every write, and only then
/// removes the files they make redundant; replays the logs into the
/// root buffer, starts a new log (recorded in the manifest) and the
/// worker.
pub(crate) fn open(
    fs: Arc<dyn Fs>,
    dir: &Path,
    options: Options,
    read_only: bool,
) -> Result<(Arc<Shared>, Option<WorkerHandle>)> {
    options.check()?;
    let merge_name = options
        .merge_operator
        .as_ref()
        .map_or(String::new(), |merge| merge.name());
    let padded = options.sync != SyncMode::None;
    if !read_only {
        fs.create_dir_all(dir)?;
    }
    let checked = recovery::check(fs.as_ref(), dir, read_only, true)?;
    let (tree, root, counters, store_id, next_seq, wal, manifest) = match checked {
        Some(checked) => {
            let Checked {
                recovered,
                root,
                next_seq,
                chain,
                removable,
                ..
            } = checked;
            if recovered.merge_name != merge_name {
                return Err(Error::InvalidArgument(format!(
                    "the store in {} was written with merge operator {:?}, it is opened with {:?} \
                     (a store written with an operator that is not a built-in aggregate opens only \
                     with that operator, in a program that defines it)",
                    dir.display(),
                    recovered.merge_name,
                    merge_name
                )));
            }
            let mut counters = recovered.counters;
            let (wal, manifest) = if read_only {
                (None, None)
            } else {
                // The checks passed: the tree and the chain hold every
                // write, so these hold nothing needed.
                for name in &removable {
                    fs.remove_file(&dir.join(name))?;
                }
                if !removable.is_empty() {
                    fs.sync_dir(dir)?;
                }
                let newest = *chain.last().expect("a chain holds a log");
                // Its writes were read, maybe from the page cache
                // alone: durable before a log that follows them is.
                fs.open_read_write(&dir.join(wal::file_name(newest)))?
                    .sync_data()?;
                let mut manifest = ManifestWriter::reopen(fs.as_ref(), dir, &recovered)?;
                let number = counters.next_file.max(highest_file_number(fs.as_ref(), dir)? + 1);
                let wal = Wal::create(
                    fs.as_ref(),
                    dir,
                    &LogHeader {
                        store_id: recovered.store_id,
                        number,
                        previous: newest,
                        first_seq: next_seq,
                        padded,
                        merge_name: merge_name.clone(),
                    },
                )?;
                counters.next_file = number + 1;
                counters.newest_log = number;
                counters.closed_seq = None;
                let mut payload = Vec::new();
                manifest::encode_edit(&Edit::default(), counters, &mut payload);
                manifest.append(&payload)?;
                (Some(wal), Some(manifest))
            };
            (
                recovered.tree,
                root,
                counters,
                recovered.store_id,
                next_seq,
                wal,
                manifest,
            )
        }
        None if read_only => {
            let names = if fs.is_dir(dir)? {
                fs.list_dir(dir)?
            } else {
                Vec::new()
            };
            if let Some(name) = names.iter().find(|name| recovery::looks_like_store_file(name)) {
                return Err(Error::corruption(
                    dir.join(manifest::CURRENT),
                    0,
                    format!(
                        "missing, but the directory holds {name}: the store lost the file that names its manifest \
                         (run `spillway kv repair` to rebuild it)"
                    ),
                ));
            }
            return Err(Error::InvalidArgument(format!(
                "{} holds no key-value store (no {} file)",
                dir.display(),
                manifest::CURRENT
            )));
        }
        None => {
            clear_interrupted_creation(fs.as_ref(), dir)?;
            let store_id = new_store_id(dir);
            let log_number = 2;
            let wal = Wal::create(
                fs.as_ref(),
                dir,
                &LogHeader {
                    store_id,
                    number: log_number,
                    previous: 0,
                    first_seq: 0,
                    padded,
                    merge_name: merge_name.clone(),
                },
            )?;
            let counters = Counters {
                next_file: log_number + 1,
                next_node: 2,
                log_number,
                log_seq: 0,
                newest_log: log_number,
                closed_seq: None,
            };
            let tree = Tree::empty();
            let mut snapshot = Vec::new();
            manifest::encode_snapshot(&tree, store_id, counters, &merge_name, &mut snapshot);
            let manifest = ManifestWriter::create(fs.as_ref(), dir, 1, &snapshot)?;
            (
                tree,
                RootBuffer::new(),
                counters,
                store_id,
                0,
                Some(wal),
                Some(manifest),
            )
        }
    };
    let next_file = counters.next_file.max(highest_file_number(fs.as_ref(), dir)? + 1);
    let cache = Arc::new(FileCache::new(fs.clone(), options.limits.open_files_max));
    let view = View {
        frozen: None,
        tree: Arc::new(tree),
    };
    let current_log = wal.as_ref().map(|wal| wal.sync().clone());
    let shared = Arc::new(Shared {
        fs: fs.clone(),
        dir: dir.to_path_buf(),
        store_id,
        merge_name,
        read_only,
        damage: Mutex::new(Vec::new()),
        closed: AtomicBool::new(false),
        poison: Poison::default(),
        cache,
        next_file: AtomicU64::new(next_file),
        writer: Mutex::new(Writer {
            wal,
            next_seq,
            root_seq_first: counters.log_seq,
        }),
        current_log: Mutex::new(current_log),
        spare_root: Mutex::new(None),
        spare_log: Mutex::new(SpareLog::default()),
        active: RwLock::new(root),
        view: RwLock::new(view),
        control: Mutex::new(Control::default()),
        wake: Condvar::new(),
        progress: Condvar::new(),
        metrics: Metrics::default(),
        options,
    });
    let worker = match manifest {
        Some(manifest) => Some(worker::start(shared.clone(), manifest, counters)?),
        None => None,
    };
    Ok((shared, worker))
}

/// The highest number of a list file, log or manifest in `dir` (0 if none).
fn highest_file_number(fs: &dyn Fs, dir: &Path) -> Result<u64> {
    Ok(fs
        .list_dir(dir)?
        .iter()
        .filter_map(|name| {
            list::parse_name(name)
                .or_else(|| wal::parse_name(name))
                .or_else(|| manifest::parse_name(name))
        })
        .max()
        .unwrap_or(0))
}

/// A new store's identity: random enough that two stores never share one
/// (the time, the process, the directory and a counter, hashed).
pub(crate) fn new_store_id(dir: &Path) -> u64 {
    static CREATED: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos());
    let mut seed = Vec::new();
    seed.extend_from_slice(&nanos.to_le_bytes());
    seed.extend_from_slice(&std::process::id().to_le_bytes());
    seed.extend_from_slice(&CREATED.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    seed.extend_from_slice(dir.as_os_str().as_encoded_bytes());
    hash64(&seed).max(1)
}

/// A directory without CURRENT may hold what a creation that was cut
/// short left (its first log, holding no write, and a manifest CURRENT
/// never named): removed, so the store is created again. Any other store
/// file there is corruption: a store whose CURRENT is gone.
fn clear_interrupted_creation(fs: &dyn Fs, dir: &Path) -> Result<()> {
    let names: Vec<String> = fs
        .list_dir(dir)?
        .into_iter()
        .filter(|name| recovery::looks_like_store_file(name))
        .collect();
    for name in &names {
        let leftover = match name.as_str() {
            "MANIFEST-000001" | "CURRENT.tmp" => true,
            "000002.log" => wal::read(fs, dir, 2, |_, _| Ok(()))
                .map(|contents| contents.is_none_or(|contents| contents.end_seq == 0))
                .unwrap_or(false),
            _ => false,
        };
        if !leftover {
            return Err(Error::corruption(
                dir.join(manifest::CURRENT),
                0,
                format!(
                    "missing, but the directory holds {name}: the store lost the file that names its manifest \
                     (run `spillway kv repair` to rebuild it)"
                ),
            ));
        }
    }
    for name in &names {
        fs.remove_file(&dir.join(name))?;
    }
    Ok(())
}

/// After a failed open: removes what it created in `dir` (the `LOCK`
/// file, the files of a store it began to create, the directory if it
/// made it). A store that existed keeps every file it had; the files
/// an open of it made are the chain's and the next open accounts for
/// them.
pub(crate) fn remove_created(dir: &Path, existed: bool, before: &HashSet<String>) {
    let fs = RealFs::new();
    let had_store = before.contains(manifest::CURRENT);
    let Ok(names) = fs.list_dir(dir) else {
        return;
    };
    for name in names {
        let created_by_us = !before.contains(&name)
            && (name == "LOCK" || (!had_store && recovery::looks_like_store_file(&name)));
        if created_by_us {
            let _ = fs.remove_file(&dir.join(&name));
        }
    }
    if !existed {
        let _ = fs.remove_dir(dir);
    }
}
