//! The contenders behind one trait: Spillway's store and RocksDB, each
//! configured as DESIGN and BENCHMARKS say (no compression, the
//! write-ahead log on, 2 background threads; RocksDB with 10-bit Bloom
//! filters, Spillway with its defaults: at least 10 bits per key, within 2
//! bytes of index memory per key).

use std::path::Path;

use anyhow::{Context, Result};
use serde_json::{json, Value};

/// Puts to write at once: keys and values back to back, fixed widths.
#[derive(Debug)]
pub struct Pending {
    key_bytes: usize,
    value_bytes: usize,
    data: Vec<u8>,
}

impl Pending {
    /// An empty batch of records with keys and values of these sizes.
    pub fn new(key_bytes: usize, value_bytes: usize) -> Pending {
        Pending {
            key_bytes,
            value_bytes,
            data: Vec::new(),
        }
    }

    /// Empties the batch, keeping its memory.
    pub fn clear(&mut self) {
        self.data.clear();
    }

    /// Room for one more record: its key and value, to fill in.
    pub fn push(&mut self) -> (&mut [u8], &mut [u8]) {
        let start = self.data.len();
        self.data.resize(start + self.key_bytes + self.value_bytes, 0);
        self.data[start..].split_at_mut(self.key_bytes)
    }

    /// The records, as (key, value).
    pub fn records(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.data
            .chunks_exact(self.key_bytes + self.value_bytes)
            .map(|record| record.split_at(self.key_bytes))
    }
}

/// A store under test.
pub trait Engine: Send + Sync {
    /// Writes the batch atomically, through the log.
    fn write(&self, pending: &Pending) -> Result<()>;
    /// Whether `key` has a value (read whole).
    fn get(&self, key: &[u8]) -> Result<bool>;
    /// Seconds writers waited for the engine's background work.
    fn stall_seconds(&self) -> f64;
    /// The engine's own statistics.
    fn stats(&self) -> Value;
    /// Closes the store, making it durable.
    fn close(self: Box<Self>) -> Result<()>;
}

/// This process's peak resident memory, from /proc/self/status (VmHWM).
pub fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024)
        })
        .unwrap_or(0)
}

struct Spillway {
    store: spillway_kv::Store,
    /// Emptied and refilled for each write, as the LevelDB driver reuses
    /// its batch (the RocksDB binding's `write_opt` takes its batch by
    /// value, so that driver builds a new one each time).
    batch: std::sync::Mutex<spillway_kv::WriteBatch>,
}

/// Spillway's store with its defaults, the log synced per write with `sync`.
pub fn open_spillway(dir: &Path, sync: bool) -> Result<Box<dyn Engine>> {
    let options = spillway_kv::Options {
        sync: if sync { spillway_kv::SyncMode::Always } else { spillway_kv::SyncMode::None },
        ..spillway_kv::Options::default()
    };
    let store = spillway_kv::Store::open(dir, options).with_context(|| format!("opening Spillway in {}", dir.display()))?;
    Ok(Box::new(Spillway {
        store,
        batch: std::sync::Mutex::new(spillway_kv::WriteBatch::new()),
    }))
}

impl Engine for Spillway {
    fn write(&self, pending: &Pending) -> Result<()> {
        let mut batch = self.batch.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        batch.clear();
        for (key, value) in pending.records() {
            batch.put(key, value);
        }
        Ok(self.store.write(&batch)?)
    }

    fn get(&self, key: &[u8]) -> Result<bool> {
        Ok(self.store.get(key)?.is_some())
    }

    fn stall_seconds(&self) -> f64 {
        self.store.stats().stall_seconds
    }

    fn stats(&self) -> Value {
        let stats = self.store.stats();
        json!({
            "height": stats.height,
            "nodes": stats.nodes,
            "leaves": stats.leaves,
            "lists": stats.lists,
            "list_files": stats.list_files,
            "list_records": stats.list_records,
            "list_file_bytes": stats.list_file_bytes,
            "index_memory_bytes": stats.index_memory_bytes,
            "root_spills": stats.root_spills,
            "node_spills": stats.node_spills,
            "fast_splits": stats.fast_splits,
            "slow_splits": stats.slow_splits,
            "collapses": stats.collapses,
            "forced": stats.forced,
            "stalls": stats.stalls,
            "wal_bytes": stats.wal_bytes,
            "logs_over_spares": stats.logs_over_spares,
            "list_bytes_written": stats.list_bytes_written,
            "list_bytes_read": stats.list_bytes_read,
            "gets": stats.gets,
            "get_block_reads": stats.get_block_reads,
            "get_filter_passes": stats.get_filter_passes,
        })
    }

    fn close(self: Box<Self>) -> Result<()> {
        Ok(self.store.close()?)
    }
}

#[cfg(feature = "rocksdb")]
mod rocks {
    use super::*;
    use rocksdb::statistics::Ticker;
    use rocksdb::{BlockBasedOptions, Cache, DBCompactionStyle, DBCompressionType, Options, WriteBatch, WriteOptions, DB};

    /// Block cache: RocksDB's default size. Everything else is the page
    /// cache, as for the other engines.
    const BLOCK_CACHE_BYTES: usize = 8 << 20;

    pub struct Rocks {
        db: DB,
        options: Options,
        write_options: WriteOptions,
    }

    /// RocksDB's defaults (64 MiB memtables) with 2 background jobs, no
    /// compression, 10-bit Bloom filters, statistics on (for stall time),
    /// leveled or universal compaction.
    pub fn open(dir: &Path, sync: bool, universal: bool) -> Result<Box<dyn Engine>> {
        let mut options = Options::default();
        options.create_if_missing(true);
        options.increase_parallelism(2);
        options.set_max_background_jobs(2);
        options.set_compression_type(DBCompressionType::None);
        options.set_max_open_files(10_000);
        options.enable_statistics();
        if universal {
            options.set_compaction_style(DBCompactionStyle::Universal);
        }
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&Cache::new_lru_cache(BLOCK_CACHE_BYTES));
        table.set_bloom_filter(10.0, false);
        options.set_block_based_table_factory(&table);
        let db = DB::open(&options, dir).with_context(|| format!("opening RocksDB in {}", dir.display()))?;
        let mut write_options = WriteOptions::default();
        write_options.set_sync(sync);
        write_options.disable_wal(false);
        Ok(Box::new(Rocks {
            db,
            options,
            write_options,
        }))
    }

    impl Engine for Rocks {
        fn write(&self, pending: &Pending) -> Result<()> {
            let mut batch = WriteBatch::default();
            for (key, value) in pending.records() {
                batch.put(key, value);
            }
            Ok(self.db.write_opt(batch, &self.write_options)?)
        }

        fn get(&self, key: &[u8]) -> Result<bool> {
            Ok(self.db.get_pinned(key)?.is_some())
        }

        fn stall_seconds(&self) -> f64 {
            self.options.get_ticker_count(Ticker::StallMicros) as f64 / 1e6
        }

        fn stats(&self) -> Value {
            let int = |name: &str| self.db.property_int_value(name).ok().flatten().unwrap_or(0);
            json!({
                "live_sst_bytes": int("rocksdb.live-sst-files-size"),
                "estimate_keys": int("rocksdb.estimate-num-keys"),
                "filter_and_index_bytes": int("rocksdb.estimate-table-readers-mem"),
                "memtable_bytes": int("rocksdb.cur-size-all-mem-tables"),
                "compaction_bytes_written": self.options.get_ticker_count(Ticker::CompactWriteBytes),
                "flush_bytes_written": self.options.get_ticker_count(Ticker::FlushWriteBytes),
                "wal_bytes": self.options.get_ticker_count(Ticker::WalFileBytes),
                "stall_micros": self.options.get_ticker_count(Ticker::StallMicros),
            })
        }

        fn close(self: Box<Self>) -> Result<()> {
            self.db.flush_wal(true)?;
            Ok(())
        }
    }
}

/// RocksDB (leveled, or universal compaction).
#[cfg(feature = "rocksdb")]
pub fn open_rocksdb(dir: &Path, sync: bool, universal: bool) -> Result<Box<dyn Engine>> {
    rocks::open(dir, sync, universal)
}

/// Built without RocksDB.
#[cfg(not(feature = "rocksdb"))]
pub fn open_rocksdb(_dir: &Path, _sync: bool, _universal: bool) -> Result<Box<dyn Engine>> {
    anyhow::bail!("this kv-driver was built without RocksDB (--no-default-features)")
}
