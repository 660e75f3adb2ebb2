//! The index layer alone: a stream cut into buffers, each indexed by a
//! template B+ tree, an ordinary B+ tree rebuilt per buffer, or a std
//! `BTreeMap`, then read out in key order as a flush does.
//!
//! Per buffer, two phases are timed apart:
//! - insert: every entry of the buffer, in batches, from 1 or more threads
//!   (a template takes per-leaf locks; `BPlusTree` and `BTreeMap` are
//!   single-writer and take one `Mutex` per batch);
//! - drain: the entries read out sorted by key (what a flush writes), the
//!   next buffer's tree made (a template's empty copy, a template rebuilt
//!   from the drained keys, or a fresh tree), and the old tree dropped.
//!
//! The first buffer of the fixed template grows a `BPlusTree` (the seed's
//! way of making the template), timed like the baseline's. The rebuild
//! policy starts, as `StreamIndex` does, from a template of one leaf, and
//! rebuilds within a buffer when the template is stretched past the
//! threshold (timed with the inserts).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use serde_json::{json, Value};
use spillway_stream::{BPlusTree, Entry, OverflowStats, TemplateTree};
use spillway_workload::StreamRecord;

use crate::measure::{Checksum, Latencies};

/// What indexes the buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum IndexContender {
    /// The seed's template: the first buffer's grown tree, never changed.
    TemplateFixed,
    /// A template rebuilt from a buffer's keys when more than the threshold
    /// of its leaves (or entries) overflowed: within the buffer, and for
    /// the next one.
    TemplateRebuild,
    /// `BPlusTree` with splits, a new one per buffer (the seed's baseline).
    Bptree,
    /// `std::collections::BTreeMap<(key, seq), location>`, a new one per
    /// buffer.
    Btreemap,
}

impl IndexContender {
    /// The name the report uses.
    pub fn name(self) -> &'static str {
        match self {
            IndexContender::TemplateFixed => "template-fixed",
            IndexContender::TemplateRebuild => "template-rebuild",
            IndexContender::Bptree => "bptree",
            IndexContender::Btreemap => "btreemap",
        }
    }

    fn uses_template(self) -> bool {
        matches!(
            self,
            IndexContender::TemplateFixed | IndexContender::TemplateRebuild
        )
    }
}

/// How the index layer is run.
#[derive(Debug, Clone)]
pub struct IndexOptions {
    /// Records per buffer.
    pub buffer: usize,
    /// Entries per insert call.
    pub batch: usize,
    /// Inserting threads.
    pub threads: usize,
    /// Children per internal node.
    pub fan_out: usize,
    /// Entries per leaf.
    pub leaf_capacity: usize,
    /// Share of overflowed leaves above which the rebuild policy rebuilds.
    pub threshold: f64,
    /// Leaf fill a rebuilt template aims at.
    pub fill: f64,
}

/// A buffer's index.
enum Tree {
    Growing(Mutex<BPlusTree>),
    /// The template, and whether it is rebuilt within the buffer.
    Template(RwLock<TemplateTree>, bool),
    Map(Mutex<BTreeMap<(u64, u64), u64>>),
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Tree {
    fn fresh(contender: IndexContender, options: &IndexOptions) -> Tree {
        match contender {
            IndexContender::Btreemap => Tree::Map(Mutex::new(BTreeMap::new())),
            IndexContender::TemplateRebuild => Tree::Template(
                RwLock::new(TemplateTree::single_leaf(options.leaf_capacity)),
                true,
            ),
            _ => Tree::Growing(Mutex::new(BPlusTree::new(options.fan_out, options.leaf_capacity))),
        }
    }

    /// Inserts one batch; `first_seq` numbers the buffer's first record
    /// (the `BTreeMap` key is (key, seq), so equal keys stay distinct).
    /// Counts a template rebuilt within the buffer in `rebuilds`.
    fn insert(&self, batch: &[Entry], first_seq: u64, options: &IndexOptions, rebuilds: &AtomicU64) {
        match self {
            Tree::Growing(tree) => {
                let mut tree = lock(tree);
                for entry in batch {
                    tree.insert(*entry);
                }
            }
            Tree::Template(tree, rebuild) => {
                tree.read()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert_batch(batch);
                if *rebuild
                    && TemplateTree::rebuild_if_stretched(
                        tree,
                        options.buffer,
                        options.threshold,
                        options.fan_out,
                        options.fill,
                    )
                {
                    rebuilds.fetch_add(1, Ordering::Relaxed);
                }
            }
            Tree::Map(map) => {
                let mut map = lock(map);
                for entry in batch {
                    map.insert((entry.key, first_seq + entry.location), entry.location);
                }
            }
        }
    }
}

/// Inserts `entries` in batches of `batch`, thread `t` of `threads`
/// taking batches `t, t + threads, ...`; returns each batch's latency.
fn insert_all(
    tree: &Tree,
    entries: &[Entry],
    first_seq: u64,
    options: &IndexOptions,
    rebuilds: &AtomicU64,
) -> Latencies {
    let (batch, threads) = (options.batch, options.threads);
    let batches = entries.len().div_ceil(batch);
    if threads == 1 {
        let mut latencies = Latencies::with_capacity(batches);
        for chunk in entries.chunks(batch) {
            let started = Instant::now();
            tree.insert(chunk, first_seq, options, rebuilds);
            latencies.record_since(started);
        }
        return latencies;
    }
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|thread| {
                scope.spawn(move || {
                    let mut latencies = Latencies::with_capacity(batches / threads + 1);
                    for chunk in entries.chunks(batch).skip(thread).step_by(threads) {
                        let started = Instant::now();
                        tree.insert(chunk, first_seq, options, rebuilds);
                        latencies.record_since(started);
                    }
                    latencies
                })
            })
            .collect();
        let mut all = Latencies::with_capacity(batches);
        for worker in workers {
            all.extend(worker.join().expect("an inserting thread panicked"));
        }
        all
    })
}

fn add_overflow(total: &mut OverflowStats, stats: &OverflowStats) {
    total.leaves += stats.leaves;
    total.entries += stats.entries;
    total.overflow_entries += stats.overflow_entries;
    for (sum, count) in total.overflowed.iter_mut().zip(stats.overflowed) {
        *sum += count;
    }
}

/// The seed's Tables 4.1-4.3 for `stats`: the percentage of leaves with
/// 1, 2 and 3 or more overflow nodes.
pub fn overflow_json(stats: &OverflowStats) -> Value {
    let percent = |count: usize| {
        if stats.leaves == 0 {
            0.0
        } else {
            100.0 * count as f64 / stats.leaves as f64
        }
    };
    json!({
        "leaves": stats.leaves,
        "entries": stats.entries,
        "overflowed": stats.overflowed,
        "percent_1": percent(stats.overflowed[0]),
        "percent_2": percent(stats.overflowed[1]),
        "percent_3_plus": percent(stats.overflowed[2]),
        "percent_any": percent(stats.overflowed_leaves()),
        "percent_entries_in_overflow": 100.0 * stats.overflow_entries_share(),
    })
}

/// Runs `contender` over `records`; returns the run's JSON report.
pub fn run(records: &[StreamRecord], contender: IndexContender, options: &IndexOptions) -> Result<Value> {
    ensure!(options.threads >= 1, "--threads must be at least 1");
    ensure!(
        options.buffer >= 1 && options.batch >= 1,
        "--buffer and --batch must be at least 1"
    );
    let mut insert_time = Duration::ZERO;
    let mut drain_time = Duration::ZERO;
    let mut latencies = Latencies::with_capacity(records.len().div_ceil(options.batch));
    let mut overflow = OverflowStats::default();
    let mut overflow_per_buffer = Vec::new();
    let mut templates = 0u64;
    let rebuilds = AtomicU64::new(0);
    let mut template_leaves = 0usize;
    let mut drained = Checksum::default();
    let mut next: Option<Tree> = None;
    let mut sorted: Vec<Entry> = Vec::new();
    let mut pairs: Vec<(u64, u64)> = Vec::new();
    let buffers = records.len().div_ceil(options.buffer);
    for (number, chunk) in records.chunks(options.buffer).enumerate() {
        let first_seq = (number * options.buffer) as u64;
        let entries: Vec<Entry> = chunk
            .iter()
            .enumerate()
            .map(|(location, record)| Entry {
                key: record.key,
                time: record.time,
                location: location as u64,
            })
            .collect();
        let tree = next.take().unwrap_or_else(|| Tree::fresh(contender, options));

        let started = Instant::now();
        let batch_latencies = insert_all(&tree, &entries, first_seq, options, &rebuilds);
        insert_time += started.elapsed();
        latencies.extend(batch_latencies);

        let started = Instant::now();
        let is_last = number + 1 == buffers;
        match tree {
            Tree::Growing(grown) => {
                let grown = grown.into_inner().unwrap_or_else(PoisonError::into_inner);
                sorted.clear();
                sorted.reserve(grown.len());
                grown.range(0, u64::MAX, |entry| sorted.push(*entry));
                if contender.uses_template() && !is_last {
                    let template = TemplateTree::from_tree(&grown);
                    template_leaves = template.leaf_count();
                    templates += 1;
                    next = Some(Tree::Template(
                        RwLock::new(template),
                        contender == IndexContender::TemplateRebuild,
                    ));
                }
                drop(grown);
            }
            Tree::Template(template, _) => {
                let template = template.into_inner().unwrap_or_else(PoisonError::into_inner);
                // As a flush does: each leaf read out and sorted, the
                // overflow counted, and (rebuild policy) a template made
                // from the keys when the template calls for it (see
                // `OverflowStats::calls_for_rebuild`).
                sorted.clear();
                template.extend_range(0, u64::MAX, &mut sorted);
                let stats = template.overflow_stats();
                if !is_last {
                    let rebuild = contender == IndexContender::TemplateRebuild
                        && stats.calls_for_rebuild(options.threshold, options.fill, options.leaf_capacity);
                    let made = if rebuild {
                        let keys: Vec<u64> = sorted.iter().map(|entry| entry.key).collect();
                        templates += 1;
                        TemplateTree::from_keys(&keys, options.fan_out, options.leaf_capacity, options.fill)
                    } else {
                        template.empty_copy()
                    };
                    template_leaves = made.leaf_count();
                    next = Some(Tree::Template(
                        RwLock::new(made),
                        contender == IndexContender::TemplateRebuild,
                    ));
                }
                add_overflow(&mut overflow, &stats);
                overflow_per_buffer.push(json!({
                    "buffer": number,
                    "leaves": stats.leaves,
                    "overflowed": stats.overflowed,
                    "percent_any": 100.0 * stats.overflowed_share(),
                    "percent_entries_in_overflow": 100.0 * stats.overflow_entries_share(),
                }));
                drop(template);
            }
            Tree::Map(map) => {
                let map = map.into_inner().unwrap_or_else(PoisonError::into_inner);
                pairs.clear();
                pairs.reserve(map.len());
                pairs.extend(map.iter().map(|(&(key, _), &location)| (key, location)));
                drop(map);
            }
        }
        drain_time += started.elapsed();

        // Untimed: what was drained is every entry, in key order.
        let keys_in_order: Box<dyn Iterator<Item = (u64, u64)>> = if contender == IndexContender::Btreemap {
            Box::new(pairs.iter().copied())
        } else {
            Box::new(sorted.iter().map(|entry| (entry.key, entry.location)))
        };
        let mut count = 0usize;
        let mut previous = 0u64;
        for (key, location) in keys_in_order {
            ensure!(
                key >= previous,
                "{}: buffer {number} drained out of key order",
                contender.name()
            );
            previous = key;
            drained.add(key, entries[location as usize].time);
            count += 1;
        }
        ensure!(
            count == entries.len(),
            "{}: buffer {number} drained {count} of {} entries",
            contender.name(),
            entries.len()
        );
    }
    let insert_s = insert_time.as_secs_f64();
    let drain_s = drain_time.as_secs_f64();
    let n = records.len() as f64;
    Ok(json!({
        "experiment": "index",
        "contender": contender.name(),
        "threads": options.threads,
        "records": records.len(),
        "buffer": options.buffer,
        "buffers": buffers,
        "batch": options.batch,
        "fan_out": options.fan_out,
        "leaf_capacity": options.leaf_capacity,
        "threshold": options.threshold,
        "fill": options.fill,
        "insert_s": insert_s,
        "drain_s": drain_s,
        "insert_records_per_s": n / insert_s,
        "total_records_per_s": n / (insert_s + drain_s),
        "insert_ns_per_record": 1e9 * insert_s / n,
        "batch_latency": latencies.summary(),
        "templates": templates + rebuilds.load(Ordering::Relaxed),
        "rebuilds_within_buffers": rebuilds.load(Ordering::Relaxed),
        "template_leaves": template_leaves,
        "overflow": if contender.uses_template() { overflow_json(&overflow) } else { Value::Null },
        "overflow_per_buffer": overflow_per_buffer,
        "drained": drained.to_json(),
    }))
}
