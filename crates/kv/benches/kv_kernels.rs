//! Micro-benchmark of the key-value store's hot kernels, through its public
//! API: the root buffer's insert (batches of 1000 with the log written but
//! not synced, the root never full), the root's spill (its records sorted
//! by hash and written as lists: `flush`), and a GET's filter test (keys
//! never written) and block read (keys written), the page cache warm:
//! `cargo bench -p spillway-kv --bench kv_kernels -- [RECORDS]`.
//! Prints records/s for the insert and the spill, ns per GET, and the
//! device blocks a GET read.

use std::time::Instant;

use spillway_kv::{Options, Store, SyncMode, WriteBatch};

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The 8-byte key of record `index` (distinct for distinct indexes).
fn key(index: u64) -> [u8; 8] {
    splitmix64(index).to_be_bytes()
}

fn main() {
    let records: u64 = std::env::args()
        .skip(1)
        .find(|argument| !argument.starts_with('-'))
        .map_or(1_000_000, |value| value.parse().expect("RECORDS"));
    if cfg!(debug_assertions) {
        eprintln!("WARNING: debug build; run with cargo bench (release) for real numbers");
    }
    let dir = tempfile::tempdir().expect("temporary directory");
    // A root large enough for every record (16 bytes each plus its index),
    // so that the inserts never wait for a spill.
    let options = Options {
        root_bytes: 256 << 20,
        sync: SyncMode::None,
        ..Options::default()
    };
    let store = Store::open(dir.path(), options).expect("open");

    let mut batch = WriteBatch::new();
    let started = Instant::now();
    for first in (0..records).step_by(1000) {
        batch.clear();
        for index in first..(first + 1000).min(records) {
            batch.put(&key(index), &index.to_le_bytes());
        }
        store.write(&batch).expect("write");
    }
    let seconds = started.elapsed().as_secs_f64();
    let spills = store.stats().root_spills;
    println!(
        "root insert: {records} records of 16 bytes in batches of 1000, log not synced: {seconds:.3} s, \
         {:.2} M records/s, {:.0} MB/s of records ({spills} root spills)",
        records as f64 / seconds / 1e6,
        records as f64 * 16.0 / seconds / 1e6
    );

    let started = Instant::now();
    store.flush().expect("flush");
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "root spill (sort by hash, write lists): {records} records in {seconds:.3} s, {:.2} M records/s",
        records as f64 / seconds / 1e6
    );

    let gets = records.min(200_000);
    for (what, offset) in [
        ("never written (filter test)", records),
        ("written (block read)", 0),
    ] {
        let before = store.stats();
        let started = Instant::now();
        let mut found = 0u64;
        for index in 0..gets {
            found += u64::from(store.get(&key(offset + index)).expect("get").is_some());
        }
        let seconds = started.elapsed().as_secs_f64();
        let after = store.stats();
        assert_eq!(found, if offset == 0 { gets } else { 0 });
        println!(
            "get, keys {what}: {gets} gets in {seconds:.3} s, {:.0} ns/get, {:.3} block reads/get",
            seconds * 1e9 / gets as f64,
            (after.get_block_reads - before.get_block_reads) as f64 / gets as f64
        );
    }
    store.close().expect("close");
}
