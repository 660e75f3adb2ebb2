//! Whole stores through one trait: Spillway's `StreamIndex`, an in-memory
//! store indexed by a std `BTreeMap`, and RocksDB (in `rocks.rs`); and the
//! three workloads run on them: ingest, range queries and the 99/1 mix.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Mutex, PoisonError, RwLock};
use std::time::Instant;

use anyhow::{ensure, Result};
use serde_json::{json, Value};
use spillway_stream::{Batch, Bounds, Options, Records, StreamIndex, TemplatePolicy};
use spillway_workload::StreamRecord;

use crate::index::overflow_json;
use crate::measure::{Checksum, Latencies};

/// A store under test. Shared by the writing and querying threads.
pub trait Engine: Sync {
    /// Writes `records` as one batch; record `i` is the stream's record
    /// `first_seq + i`.
    fn write(&self, records: &[StreamRecord], first_seq: u64) -> Result<()>;

    /// Every record with `low <= key <= high`, materialized as the engine
    /// returns records (key, time and value), summarized.
    fn range(&self, low: u64, high: u64) -> Result<Checksum>;

    /// The same records in no particular order and without copying them,
    /// where the engine has such a read (Spillway's `scan`): how much of a
    /// range query is the ordered merge and the copy. `None` elsewhere.
    fn scan_unordered(&self, _low: u64, _high: u64) -> Option<Result<Checksum>> {
        None
    }

    /// After an ingest: whatever the engine does before it is at rest
    /// (RocksDB: flush the memtable and wait for compactions); reported
    /// apart from the ingest.
    fn settle(&self) -> Result<()> {
        Ok(())
    }

    /// The engine's own counters.
    fn stats(&self) -> Value;
}

/// Spillway's stream index.
pub struct Spillway {
    index: StreamIndex,
    /// The result of the last range query, whose memory the next reuses
    /// (as a caller running query after query would).
    found: Mutex<Records>,
    /// Seconds the last `settle` waited for background tier merges.
    settle_s: Mutex<f64>,
}

impl std::fmt::Debug for Spillway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spillway").finish_non_exhaustive()
    }
}

/// Bytes a record costs a `StreamIndex` buffer beyond its value (the
/// crate's `RECORD_OVERHEAD_BYTES`, private to it): a buffer of
/// `records * (this + 8)` bytes holds `records` records of 8-byte values.
/// The driver checks the flush count it implies after an ingest.
pub const SPILLWAY_RECORD_OVERHEAD_BYTES: usize = 56;

impl Spillway {
    /// Opens a new store in `dir` whose buffers hold `buffer_records`
    /// records of 8-byte values.
    pub fn open(
        dir: &Path,
        policy: TemplatePolicy,
        sync: bool,
        tiers: bool,
        buffer_records: usize,
    ) -> Result<Spillway> {
        let options = Options {
            buffer_bytes: buffer_records * (SPILLWAY_RECORD_OVERHEAD_BYTES + 8),
            template: policy,
            sync,
            tiers,
            ..Options::default()
        };
        Ok(Spillway {
            index: StreamIndex::open(dir, options)?,
            found: Mutex::default(),
            settle_s: Mutex::default(),
        })
    }
}

impl Engine for Spillway {
    fn write(&self, records: &[StreamRecord], _first_seq: u64) -> Result<()> {
        let mut batch = Batch::new();
        for record in records {
            batch.append(record.key, record.time, &record.value.to_le_bytes());
        }
        Ok(self.index.write(&batch)?)
    }

    fn range(&self, low: u64, high: u64) -> Result<Checksum> {
        let mut found = self.found.lock().unwrap_or_else(PoisonError::into_inner);
        self.index.range_into(Bounds::keys(low, high), &mut found)?;
        let mut checksum = Checksum::default();
        for (&key, &time) in found.keys.iter().zip(&found.times) {
            checksum.add(key, time);
        }
        Ok(checksum)
    }

    fn scan_unordered(&self, low: u64, high: u64) -> Option<Result<Checksum>> {
        let mut checksum = Checksum::default();
        let scanned = self
            .index
            .scan(Bounds::keys(low, high), |key, time, _, _| checksum.add(key, time));
        Some(scanned.map(|()| checksum).map_err(Into::into))
    }

    /// Waits for the background merges into tiers still running after
    /// the ingest (as RocksDB's settle waits for its compactions).
    fn settle(&self) -> Result<()> {
        let started = std::time::Instant::now();
        self.index.settle();
        *self.settle_s.lock().unwrap_or_else(PoisonError::into_inner) = started.elapsed().as_secs_f64();
        Ok(())
    }

    fn stats(&self) -> Value {
        let stats = self.index.stats();
        let options = self.index.options();
        json!({
            "buffer_bytes": options.buffer_bytes,
            "leaf_capacity": options.leaf_capacity,
            "fan_out": options.fan_out,
            "fill": options.fill,
            "cache_bytes_budget": options.cache_bytes,
            "writes": stats.writes,
            "buffer_records": stats.buffer_records,
            "segments": stats.segments,
            "segment_records": stats.segment_records,
            "segment_bytes": stats.segment_bytes,
            "flushes": stats.flushes,
            "flush_pause_seconds": stats.flush_pause_seconds,
            "templates": stats.templates,
            "template_leaves": stats.template_leaves,
            "last_overflow": overflow_json(&stats.last_overflow),
            "total_overflow": overflow_json(&stats.total_overflow),
            "cache_bytes": stats.cache_bytes,
            "leaves_read": stats.leaves_read,
            "tiers": stats.tiers,
            "tier_merges": stats.tier_merges,
            "tier_records": stats.tier_records,
            "settle_s": *self.settle_s.lock().unwrap_or_else(PoisonError::into_inner),
        })
    }
}

/// An in-memory store: records appended to columns, indexed by a std
/// `BTreeMap<(key, seq), location>`, all under one `RwLock` (a `BTreeMap`
/// has one writer at a time).
#[derive(Debug, Default)]
pub struct Memory {
    state: RwLock<MemoryState>,
    /// The last range query's result, whose memory the next reuses.
    found: Mutex<Vec<(u64, u64, f64)>>,
}

#[derive(Debug, Default)]
struct MemoryState {
    index: BTreeMap<(u64, u64), u64>,
    times: Vec<u64>,
    values: Vec<f64>,
}

impl Engine for Memory {
    fn write(&self, records: &[StreamRecord], first_seq: u64) -> Result<()> {
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        for (i, record) in records.iter().enumerate() {
            let location = state.times.len() as u64;
            state.times.push(record.time);
            state.values.push(record.value);
            state.index.insert((record.key, first_seq + i as u64), location);
        }
        Ok(())
    }

    fn range(&self, low: u64, high: u64) -> Result<Checksum> {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        let mut found = self.found.lock().unwrap_or_else(PoisonError::into_inner);
        found.clear();
        for (&(key, _), &location) in state.index.range((low, 0)..=(high, u64::MAX)) {
            let location = location as usize;
            found.push((key, state.times[location], state.values[location]));
        }
        let mut checksum = Checksum::default();
        for &(key, time, _) in found.iter() {
            checksum.add(key, time);
        }
        Ok(checksum)
    }

    fn stats(&self) -> Value {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        json!({"records": state.index.len()})
    }
}

/// Writes `records` in batches of `batch`, thread `t` of `threads` taking
/// batches `t, t + threads, ...`; returns the wall time and every write
/// call's latency.
pub fn ingest(engine: &dyn Engine, records: &[StreamRecord], batch: usize, threads: usize) -> Result<Value> {
    ensure!(
        threads >= 1 && batch >= 1,
        "--threads and --batch must be at least 1"
    );
    let batches = records.len().div_ceil(batch);
    let started = Instant::now();
    let mut latencies = std::thread::scope(|scope| -> Result<Latencies> {
        let workers: Vec<_> = (0..threads)
            .map(|thread| {
                scope.spawn(move || -> Result<Latencies> {
                    let mut latencies = Latencies::with_capacity(batches / threads + 1);
                    for (number, chunk) in records.chunks(batch).enumerate().skip(thread).step_by(threads) {
                        let call = Instant::now();
                        engine.write(chunk, (number * batch) as u64)?;
                        latencies.record_since(call);
                    }
                    Ok(latencies)
                })
            })
            .collect();
        let mut all = Latencies::with_capacity(batches);
        for worker in workers {
            all.extend(worker.join().expect("a writer panicked")?);
        }
        Ok(all)
    })?;
    let wall_s = started.elapsed().as_secs_f64();
    Ok(json!({
        "wall_s": wall_s,
        "records_per_s": records.len() as f64 / wall_s,
        "write_latency": latencies.summary(),
    }))
}

/// Runs every range of `sets` (a selectivity and its ranges) once,
/// single-threaded; reports latency and what was found per selectivity.
///
/// Warm-up, untimed: one scan of the whole key range (so RocksDB's block
/// cache holds what Spillway's segment cache holds), then up to 10 ranges
/// of each set.
pub fn queries(engine: &dyn Engine, sets: &[(f64, Vec<(u64, u64)>)]) -> Result<Vec<Value>> {
    engine.range(0, u64::MAX)?;
    let mut reports = Vec::new();
    for (selectivity, ranges) in sets {
        for &(low, high) in ranges.iter().take(10) {
            engine.range(low, high)?;
        }
        let mut latencies = Latencies::with_capacity(ranges.len());
        let mut found = Checksum::default();
        for &(low, high) in ranges {
            let started = Instant::now();
            let checksum = engine.range(low, high)?;
            latencies.record_since(started);
            found.merge(checksum);
        }
        let mut report = json!({
            "selectivity": selectivity,
            "queries": ranges.len(),
            "records_per_query": found.records as f64 / ranges.len().max(1) as f64,
            "found": found.to_json(),
            "latency": latencies.summary(),
        });
        // The same ranges again, unordered, where the engine can.
        let mut unordered = Latencies::with_capacity(ranges.len());
        let mut scanned = Checksum::default();
        let mut supported = true;
        for &(low, high) in ranges {
            let started = Instant::now();
            let Some(checksum) = engine.scan_unordered(low, high) else {
                supported = false;
                break;
            };
            unordered.record_since(started);
            scanned.merge(checksum?);
        }
        if supported {
            ensure!(
                scanned == found,
                "the unordered scan found {scanned:?}, the range query {found:?}"
            );
            report["unordered_latency"] = unordered.summary();
        }
        reports.push(report);
    }
    Ok(reports)
}

/// The 99/1 mix: each thread writes its batches of `inserts_per_query`
/// records (batches `t, t + threads, ...` as in [`ingest`]) and runs one
/// range query of `ranges` after each.
pub fn mixed(
    engine: &dyn Engine,
    records: &[StreamRecord],
    ranges: &[(u64, u64)],
    inserts_per_query: usize,
    threads: usize,
) -> Result<Value> {
    ensure!(
        threads >= 1 && inserts_per_query >= 1,
        "--threads and the mix must be at least 1"
    );
    ensure!(!ranges.is_empty(), "the mix needs query ranges");
    let batches = records.len().div_ceil(inserts_per_query);
    let started = Instant::now();
    let (mut writes, mut reads, found) =
        std::thread::scope(|scope| -> Result<(Latencies, Latencies, Checksum)> {
            let workers: Vec<_> = (0..threads)
                .map(|thread| {
                    scope.spawn(move || -> Result<(Latencies, Latencies, Checksum)> {
                        let mut writes = Latencies::with_capacity(batches / threads + 1);
                        let mut reads = Latencies::with_capacity(batches / threads + 1);
                        let mut found = Checksum::default();
                        for (number, chunk) in records
                            .chunks(inserts_per_query)
                            .enumerate()
                            .skip(thread)
                            .step_by(threads)
                        {
                            let call = Instant::now();
                            engine.write(chunk, (number * inserts_per_query) as u64)?;
                            writes.record_since(call);
                            let (low, high) = ranges[number % ranges.len()];
                            let call = Instant::now();
                            found.merge(engine.range(low, high)?);
                            reads.record_since(call);
                        }
                        Ok((writes, reads, found))
                    })
                })
                .collect();
            let mut writes = Latencies::default();
            let mut reads = Latencies::default();
            let mut found = Checksum::default();
            for worker in workers {
                let (w, r, f) = worker.join().expect("a worker panicked")?;
                writes.extend(w);
                reads.extend(r);
                found.merge(f);
            }
            Ok((writes, reads, found))
        })?;
    let wall_s = started.elapsed().as_secs_f64();
    let operations = records.len() + batches;
    Ok(json!({
        "wall_s": wall_s,
        "inserts": records.len(),
        "queries": batches,
        "operations_per_s": operations as f64 / wall_s,
        "records_per_s": records.len() as f64 / wall_s,
        "records_per_query": found.records as f64 / batches.max(1) as f64,
        "write_latency": writes.summary(),
        "query_latency": reads.summary(),
    }))
}
