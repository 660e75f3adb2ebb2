//! RocksDB as a stream store: a record is the key `key | time | seq`
//! (24 bytes, big-endian, so byte order is key order and a key range is a
//! contiguous scan) and its 8-byte value, written in `WriteBatch`es.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rocksdb::{
    BlockBasedOptions, Cache, DBCompressionType, Options, ReadOptions, WriteBatch, WriteOptions, DB,
};
use serde_json::{json, Value};
use spillway_workload::StreamRecord;

use crate::measure::Checksum;
use crate::store::Engine;

/// Block cache: as much as Spillway's segment cache (1 GiB), so both keep
/// the benchmark's data in memory.
const BLOCK_CACHE_BYTES: usize = 1 << 30;

/// A RocksDB database configured for the benchmark.
pub struct Rocks {
    db: DB,
    write_options: WriteOptions,
    settle_s: std::sync::Mutex<f64>,
    /// The last range query's result, whose memory the next reuses.
    found: std::sync::Mutex<Vec<(u64, u64, f64)>>,
}

impl std::fmt::Debug for Rocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rocks").finish_non_exhaustive()
    }
}

fn encode_key(key: u64, time: u64, seq: u64) -> [u8; 24] {
    let mut bytes = [0u8; 24];
    bytes[..8].copy_from_slice(&key.to_be_bytes());
    bytes[8..16].copy_from_slice(&time.to_be_bytes());
    bytes[16..].copy_from_slice(&seq.to_be_bytes());
    bytes
}

fn word(bytes: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(bytes[at..at + 8].try_into().expect("24-byte keys"))
}

impl Rocks {
    /// Opens a new database in `dir`: RocksDB's defaults (leveled
    /// compaction, 64 MiB memtables) with 2 background jobs, no
    /// compression (as every engine here), a 1 GiB block cache, and the
    /// write-ahead log on, synced on every write only with `sync`.
    pub fn open(dir: &Path, sync: bool) -> Result<Rocks> {
        let mut options = Options::default();
        options.create_if_missing(true);
        options.increase_parallelism(2);
        options.set_max_background_jobs(2);
        options.set_compression_type(DBCompressionType::None);
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&Cache::new_lru_cache(BLOCK_CACHE_BYTES));
        options.set_block_based_table_factory(&table);
        let db = DB::open(&options, dir).with_context(|| format!("opening RocksDB in {}", dir.display()))?;
        let mut write_options = WriteOptions::default();
        write_options.set_sync(sync);
        write_options.disable_wal(false);
        Ok(Rocks {
            db,
            write_options,
            settle_s: std::sync::Mutex::new(0.0),
            found: std::sync::Mutex::default(),
        })
    }

    fn int_property(&self, name: &str) -> u64 {
        self.db.property_int_value(name).ok().flatten().unwrap_or(0)
    }
}

impl Engine for Rocks {
    fn write(&self, records: &[StreamRecord], first_seq: u64) -> Result<()> {
        let mut batch = WriteBatch::default();
        for (i, record) in records.iter().enumerate() {
            batch.put(
                encode_key(record.key, record.time, first_seq + i as u64),
                record.value.to_le_bytes(),
            );
        }
        self.db.write_opt(batch, &self.write_options)?;
        Ok(())
    }

    fn range(&self, low: u64, high: u64) -> Result<Checksum> {
        let mut read_options = ReadOptions::default();
        if let Some(after) = high.checked_add(1) {
            read_options.set_iterate_upper_bound(encode_key(after, 0, 0).to_vec());
        }
        let mut iterator = self.db.raw_iterator_opt(read_options);
        iterator.seek(encode_key(low, 0, 0));
        let mut found = self
            .found
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        found.clear();
        while let (Some(key), Some(value)) = (iterator.key(), iterator.value()) {
            let value = f64::from_le_bytes(value.try_into().context("8-byte values")?);
            found.push((word(key, 0), word(key, 8), value));
            iterator.next();
        }
        iterator.status()?;
        let mut checksum = Checksum::default();
        for &(key, time, _) in found.iter() {
            checksum.add(key, time);
        }
        Ok(checksum)
    }

    /// Flushes the memtable and waits until no compaction runs or is
    /// pending, so queries see the LSM tree at rest.
    fn settle(&self) -> Result<()> {
        let started = Instant::now();
        self.db.flush()?;
        loop {
            let pending = self.int_property("rocksdb.compaction-pending");
            let running = self.int_property("rocksdb.num-running-compactions");
            let flushes = self.int_property("rocksdb.num-running-flushes");
            if pending == 0 && running == 0 && flushes == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        *self
            .settle_s
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = started.elapsed().as_secs_f64();
        Ok(())
    }

    fn stats(&self) -> Value {
        let files: Vec<u64> = (0..7)
            .map(|level| self.int_property(&format!("rocksdb.num-files-at-level{level}")))
            .collect();
        json!({
            "version": "8.10 (crate rocksdb 0.22)",
            "settle_s": *self.settle_s.lock().unwrap_or_else(std::sync::PoisonError::into_inner),
            "files_per_level": files,
            "sst_bytes": self.int_property("rocksdb.total-sst-files-size"),
            "estimated_keys": self.int_property("rocksdb.estimate-num-keys"),
            "block_cache_bytes": self.int_property("rocksdb.block-cache-usage"),
            // RocksDB's own line, e.g. "Cumulative stall: 00:00:0.000 H:M:S, 0.0 percent".
            "cumulative_stall": self
                .db
                .property_value("rocksdb.stats")
                .ok()
                .flatten()
                .and_then(|text| text.lines().find(|line| line.starts_with("Cumulative stall")).map(str::to_string)),
        })
    }
}
