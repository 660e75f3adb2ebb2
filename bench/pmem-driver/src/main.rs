//! The pmem benchmark's driver. `phases` runs the PiBench-style phases
//! (spillway_pmem::bench: inserts, searches by a distribution, batched
//! searches or scans, negative searches, deletes) on Spillway's CCEH, its
//! B3-tree or its sorted-leaf baseline in a persistence mode, or on a
//! peer map in DRAM (hashbrown, std HashMap, std BTreeMap; one thread:
//! none is concurrent). `recovery` fills a table, reads the figures of its
//! shape (load factor, bucket lines per search), leaves it as a crash
//! would (not closed), and times the open that recovers it to its first
//! operation, then the full check; `tree-recovery` does the same for a
//! tree. Each prints one JSON line.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use anyhow::{bail, ensure, Context};
use clap::{Parser, Subcommand};
use hashbrown::HashMap as Hashbrown;
use serde_json::json;
use spillway_core::{Interrupt, Result};
use spillway_pmem::b3tree::Options as TreeOptions;
use spillway_pmem::bench::{self, key, Distribution, Subject, Worker};
use spillway_pmem::cceh::Options;
use spillway_pmem::tree::{Family, SortedLeaf, B3};
use spillway_pmem::{Mode, Table, Tree};

/// The system allocator, asking for 2 MiB pages for the inside of every
/// allocation of 2 MiB or more: the peers' tables are then mapped in
/// 2 MiB pages as Spillway's region is (glibc's own switch,
/// `GLIBC_TUNABLES=glibc.malloc.hugetlb=1`, did not reach Rust's
/// allocations here). A hint: where the kernel has none, 4 KiB pages.
#[derive(Debug)]
struct HugePages;

const HUGE_PAGE: usize = 2 << 20;

fn advise_huge(start: *mut u8, size: usize) {
    let from = (start as usize).next_multiple_of(HUGE_PAGE);
    let to = (start as usize + size) & !(HUGE_PAGE - 1);
    if !start.is_null() && to > from {
        // SAFETY: a hint on whole pages inside an allocation just made.
        #[allow(unsafe_code)]
        unsafe {
            libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_HUGEPAGE);
        }
    }
}

// SAFETY: every call goes to the system allocator with its own arguments;
// the advice changes no byte.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for HugePages {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let start = System.alloc(layout);
        advise_huge(start, layout.size());
        start
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let start = System.alloc_zeroed(layout);
        advise_huge(start, layout.size());
        start
    }

    unsafe fn dealloc(&self, start: *mut u8, layout: Layout) {
        System.dealloc(start, layout);
    }

    unsafe fn realloc(&self, start: *mut u8, layout: Layout, size: usize) -> *mut u8 {
        let start = System.realloc(start, layout, size);
        advise_huge(start, size);
        start
    }
}

#[global_allocator]
static ALLOCATOR: HugePages = HugePages;

#[derive(Debug, Parser)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The four phases on one contender.
    Phases {
        /// spillway (CCEH), b3tree, fastfair (the sorted-leaf baseline),
        /// hashbrown, std or btreemap.
        #[arg(long)]
        contender: String,
        /// A tree's page (node) bytes.
        #[arg(long, default_value_t = 4096)]
        page_bytes: u64,
        #[arg(long)]
        keys: u64,
        #[arg(long, default_value_t = 1)]
        threads: usize,
        #[arg(long, default_value = "uniform")]
        distribution: Distribution,
        /// Spillway's persistence mode.
        #[arg(long, default_value = "clwb")]
        persistence: Mode,
        /// Spillway's region file (created; removed afterwards).
        #[arg(long)]
        table: Option<PathBuf>,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Load factor, lines per search and recovery times of a table of
    /// `keys` keys.
    Recovery {
        #[arg(long)]
        keys: u64,
        #[arg(long, default_value = "clwb")]
        persistence: Mode,
        #[arg(long)]
        table: PathBuf,
        /// Searches sampled for the lines read (present keys and absent).
        #[arg(long, default_value_t = 100_000)]
        samples: u64,
    },
    /// The open of a tree of `keys` keys after a crash, to its first
    /// search, the recovery its first write makes, its full check, and a
    /// clean open.
    TreeRecovery {
        /// b3tree or fastfair.
        #[arg(long)]
        contender: String,
        #[arg(long, default_value_t = 4096)]
        page_bytes: u64,
        #[arg(long)]
        keys: u64,
        #[arg(long, default_value = "clwb")]
        persistence: Mode,
        #[arg(long)]
        table: PathBuf,
    },
}

/// A peer's map of u64 to u64.
trait Map: Send {
    /// Whether it keeps its keys in order (and scans).
    const ORDERED: bool = false;

    fn put(&mut self, key: u64, value: u64);
    fn find(&self, key: u64) -> Option<u64>;
    fn delete(&mut self, key: u64);

    /// The keys read in order from `from`, up to `count`.
    fn scan(&self, from: u64, count: usize) -> usize {
        let _ = (from, count);
        unreachable!("a hash map is not scanned")
    }
}

/// The same three calls on each peer (their APIs agree).
macro_rules! map {
    ($map:ident) => {
        impl<S: BuildHasher + Send> Map for $map<u64, u64, S> {
            fn put(&mut self, key: u64, value: u64) {
                self.insert(key, value);
            }
            fn find(&self, key: u64) -> Option<u64> {
                self.get(&key).copied()
            }
            fn delete(&mut self, key: u64) {
                self.remove(&key);
            }
        }
    };
}

map!(HashMap);
map!(Hashbrown);

impl Map for BTreeMap<u64, u64> {
    const ORDERED: bool = true;

    fn put(&mut self, key: u64, value: u64) {
        self.insert(key, value);
    }
    fn find(&self, key: u64) -> Option<u64> {
        self.get(&key).copied()
    }
    fn delete(&mut self, key: u64) {
        self.remove(&key);
    }
    fn scan(&self, from: u64, count: usize) -> usize {
        self.range(from..).take(count).count()
    }
}

/// A peer map in DRAM, locked once per phase by its one worker (so no
/// operation pays for the lock).
#[derive(Debug)]
struct Peer<M>(Mutex<M>);

#[derive(Debug)]
struct PeerWorker<'a, M>(MutexGuard<'a, M>);

impl<M: Map> Subject for Peer<M> {
    type Worker<'a>
        = PeerWorker<'a, M>
    where
        M: 'a;

    const ORDERED: bool = M::ORDERED;

    fn worker(&self) -> Result<PeerWorker<'_, M>> {
        Ok(PeerWorker(self.0.lock().expect("the peer's lock")))
    }

    fn counts(&self) -> Result<(u64, u64, u64)> {
        Ok((0, 0, 0))
    }
}

impl<M: Map> Worker for PeerWorker<'_, M> {
    fn insert(&mut self, key: u64, value: u64) -> Result<()> {
        self.0.put(key, value);
        Ok(())
    }
    fn get(&mut self, key: u64) -> Result<Option<u64>> {
        Ok(self.0.find(key))
    }
    fn remove(&mut self, key: u64) -> Result<()> {
        self.0.delete(key);
        Ok(())
    }
    fn scan(&mut self, from: u64, count: usize) -> Result<usize> {
        Ok(self.0.scan(from, count))
    }
}

fn phases_json(phases: &[bench::Phase]) -> serde_json::Value {
    phases
        .iter()
        .map(|phase| {
            (
                phase.name.replace(' ', "_"),
                serde_json::to_value(phase).expect("a phase"),
            )
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// Runs the phases on a new tree of family `F` at `path` (removed after),
/// and the bytes of its region in 2 MiB pages.
fn tree_phases<F: Family>(
    path: &Path,
    page_bytes: u64,
    persistence: Mode,
    run: impl FnOnce(&Tree<F>) -> Result<Vec<bench::Phase>>,
) -> anyhow::Result<(Vec<bench::Phase>, u64)> {
    ensure!(!path.exists(), "{} exists: give a new file", path.display());
    let tree = Tree::<F>::open_or_create(path, persistence, tree_options(page_bytes))?;
    let phases = run(&tree);
    let huge_page_bytes = tree.stats()?.huge_page_bytes;
    tree.close()?;
    std::fs::remove_file(path)?;
    Ok((phases?, huge_page_bytes))
}

fn tree_options(page_bytes: u64) -> TreeOptions {
    TreeOptions {
        page_bytes,
        region_bytes: 4 << 30,
        ..TreeOptions::default()
    }
}

/// `tree-recovery` on a tree of family `F`.
fn tree_recovery<F: Family>(
    path: &Path,
    page_bytes: u64,
    keys: u64,
    persistence: Mode,
) -> anyhow::Result<()> {
    ensure!(!path.exists(), "{} exists: give a new file", path.display());
    let options = tree_options(page_bytes);
    let tree = Tree::<F>::open_or_create(path, persistence, options)?;
    for i in 0..keys {
        tree.insert(key(i, 1), i)?;
    }
    let height = tree.stats()?.height;
    // As a crash leaves it: not closed, so the next open recovers.
    drop(tree);
    let started = Instant::now();
    let tree = Tree::<F>::open_or_create(path, persistence, options)?;
    let found = tree.get(key(keys / 2, 1))?;
    let open_s = started.elapsed().as_secs_f64();
    ensure!(
        found == Some(keys / 2),
        "key {} reads {found:?} after recovery",
        keys / 2
    );
    // The first write makes a recovery the open left owed.
    let started = Instant::now();
    tree.insert(key(keys, 1), keys)?;
    let repair_s = started.elapsed().as_secs_f64();
    let started = Instant::now();
    tree.verify()?;
    let verify_s = started.elapsed().as_secs_f64();
    let len = tree.len()? as u64;
    ensure!(len == keys + 1, "{len} keys after recovery, not {}", keys + 1);
    tree.close()?;
    let started = Instant::now();
    let tree = Tree::<F>::open_or_create(path, persistence, options)?;
    let found = tree.get(key(1, 1))?;
    let clean_open_s = started.elapsed().as_secs_f64();
    ensure!(found == Some(1), "key 1 reads {found:?} after a clean open");
    tree.close()?;
    std::fs::remove_file(path)?;
    println!(
        "{}",
        json!({
            "keys": keys,
            "height": height,
            "recover_to_first_op_ms": open_s * 1e3,
            "repair_ms": repair_s * 1e3,
            "full_check_ms": verify_s * 1e3,
            "clean_open_to_first_op_ms": clean_open_s * 1e3,
        })
    );
    Ok(())
}

fn options() -> Options {
    Options {
        region_bytes: 4 << 30,
        ..Options::default()
    }
}

/// The process's anonymous memory in 2 MiB pages (a peer's heap), from
/// /proc/self/smaps_rollup; 0 where that cannot be read.
fn anonymous_huge_bytes() -> u64 {
    let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    rollup
        .lines()
        .find_map(|line| line.strip_prefix("AnonHugePages:"))
        .and_then(|kib| kib.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

fn main() -> anyhow::Result<()> {
    let interrupt = Interrupt::on_signals();
    match Cli::parse().command {
        Command::Phases {
            contender,
            page_bytes,
            keys,
            threads,
            distribution,
            persistence,
            table,
            seed,
        } => {
            // (The bytes in 2 MiB pages: the table's region, or a peer's
            // whole heap.)
            let (phases, huge_page_bytes) = match contender.as_str() {
                "spillway" => {
                    let path = table.context("spillway needs --table")?;
                    ensure!(!path.exists(), "{} exists: give a new file", path.display());
                    let table = Table::open_or_create(&path, persistence, options())?;
                    let phases = bench::run(&table, keys, threads, distribution, seed, &interrupt);
                    let huge_page_bytes = table.stats().huge_page_bytes;
                    table.close()?;
                    std::fs::remove_file(&path)?;
                    (phases?, huge_page_bytes)
                }
                "b3tree" | "fastfair" => {
                    let path = table.context("a tree needs --table")?;
                    if contender == "b3tree" {
                        tree_phases::<B3>(&path, page_bytes, persistence, |tree| {
                            bench::run(tree, keys, threads, distribution, seed, &interrupt)
                        })?
                    } else {
                        tree_phases::<SortedLeaf>(&path, page_bytes, persistence, |tree| {
                            bench::run(tree, keys, threads, distribution, seed, &interrupt)
                        })?
                    }
                }
                "hashbrown" | "std" | "btreemap" if threads != 1 => bail!("{contender} runs on one thread"),
                "hashbrown" => {
                    let map = Peer(Mutex::new(Hashbrown::<u64, u64>::new()));
                    (
                        bench::run(&map, keys, 1, distribution, seed, &interrupt)?,
                        anonymous_huge_bytes(),
                    )
                }
                "std" => {
                    let map = Peer(Mutex::new(HashMap::<u64, u64>::new()));
                    (
                        bench::run(&map, keys, 1, distribution, seed, &interrupt)?,
                        anonymous_huge_bytes(),
                    )
                }
                "btreemap" => {
                    let map = Peer(Mutex::new(BTreeMap::<u64, u64>::new()));
                    (
                        bench::run(&map, keys, 1, distribution, seed, &interrupt)?,
                        anonymous_huge_bytes(),
                    )
                }
                other => bail!(
                    "unknown contender {other:?}: spillway, b3tree, fastfair, hashbrown, std or btreemap"
                ),
            };
            println!(
                "{}",
                json!({
                    "contender": contender,
                    "keys": keys,
                    "phases": phases_json(&phases),
                    "huge_page_bytes": huge_page_bytes,
                })
            );
        }
        Command::Recovery {
            keys,
            persistence,
            table: path,
            samples,
        } => {
            ensure!(!path.exists(), "{} exists: give a new file", path.display());
            let table = Table::open_or_create(&path, persistence, options())?;
            for i in 0..keys {
                table.insert(key(i, 1), i)?;
            }
            let stats = table.stats();
            let mut present = (0u64, 0u64);
            let mut absent = (0u64, 0u64);
            for i in 0..samples {
                let lines = table.lines_read(key(i * (keys / samples.max(1)).max(1) % keys, 1))?;
                present = (present.0 + lines, present.1.max(lines));
                let lines = table.lines_read(key(i, 1 ^ 0x5555_5555_5555_5555))?;
                absent = (absent.0 + lines, absent.1.max(lines));
            }
            // As a crash leaves it: not closed, so the next open recovers.
            drop(table);
            let started = Instant::now();
            let table = Table::open_or_create(&path, persistence, options())?;
            let found = table.get(key(keys / 2, 1))?;
            let recover_s = started.elapsed().as_secs_f64();
            ensure!(
                found == Some(keys / 2),
                "key {} reads {found:?} after recovery",
                keys / 2
            );
            let started = Instant::now();
            table.repaired()?;
            let repair_s = started.elapsed().as_secs_f64();
            let started = Instant::now();
            table.verify()?;
            let verify_s = started.elapsed().as_secs_f64();
            let len = table.len()? as u64;
            ensure!(len == keys, "{len} keys after recovery, not {keys}");
            table.close()?;
            let started = Instant::now();
            let table = Table::open_or_create(&path, persistence, options())?;
            let found = table.get(key(1, 1))?;
            let clean_open_s = started.elapsed().as_secs_f64();
            ensure!(found == Some(1), "key 1 reads {found:?} after a clean open");
            table.close()?;
            std::fs::remove_file(&path)?;
            println!(
                "{}",
                json!({
                    "keys": keys,
                    "huge_page_bytes": stats.huge_page_bytes,
                    "segments": stats.segments,
                    "global_depth": stats.global_depth,
                    "load_factor": keys as f64 / stats.slots as f64,
                    "lines_per_search": present.0 as f64 / samples as f64,
                    "lines_per_search_max": present.1,
                    "lines_per_negative_search": absent.0 as f64 / samples as f64,
                    "recover_to_first_op_ms": recover_s * 1e3,
                    "repair_ms": repair_s * 1e3,
                    "full_check_ms": verify_s * 1e3,
                    "clean_open_to_first_op_ms": clean_open_s * 1e3,
                })
            );
        }
        Command::TreeRecovery {
            contender,
            page_bytes,
            keys,
            persistence,
            table,
        } => match contender.as_str() {
            "b3tree" => tree_recovery::<B3>(&table, page_bytes, keys, persistence)?,
            "fastfair" => tree_recovery::<SortedLeaf>(&table, page_bytes, keys, persistence)?,
            other => bail!("unknown tree {other:?}: b3tree or fastfair"),
        },
    }
    Ok(())
}
