//! Helpers shared by the store's integration tests.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use spillway_core::{Error, Limits};
use spillway_kv::{Kind, MergeOperator, Options, Store, SyncMode, WriteBatch};

/// Options that make a small store spill, split and grow often: a 64 KiB
/// root, 128 KiB nodes, four children, 512-byte blocks.
pub fn small_options() -> Options {
    Options {
        root_bytes: 64 << 10,
        node_bytes: 128 << 10,
        fan_out: 4,
        block_bytes: 512,
        sync: SyncMode::None,
        limits: Limits::default()
            .with_key_bytes_max(1024)
            .with_value_bytes_max(4096),
        ..Options::default()
    }
}

/// A deterministic xorshift generator.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

/// The key of number `i`.
pub fn key(i: u64) -> Vec<u8> {
    format!("key-{i:08}").into_bytes()
}

/// A value for key `i`, version `version`, of 0 to `max_len` bytes.
pub fn value(i: u64, version: u64, max_len: usize) -> Vec<u8> {
    let len = ((i * 31 + version * 7) % (max_len as u64 + 1)) as usize;
    let mut value = format!("v{version}-{i}-").into_bytes();
    value.resize(len.max(value.len()), b'x');
    value
}

/// Every live key and value of `store`, through a scan.
pub fn scanned(store: &Store) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut all = BTreeMap::new();
    for entry in store.scan().unwrap() {
        let (key, value) = entry.unwrap();
        assert!(all.insert(key, value).is_none(), "a scan returned a key twice");
    }
    all
}

/// Counts (values and operands are u64 LE), slowly: every merge sleeps,
/// so that rewriting a leaf whose lists repeat keys outlasts several
/// roots.
#[derive(Debug)]
pub struct SlowCount;

impl MergeOperator for SlowCount {
    fn name(&self) -> String {
        "slow-count".into()
    }

    fn merge(&self, _key: &[u8], older: &mut Vec<u8>, newer: &[u8]) -> spillway_core::Result<()> {
        std::thread::sleep(Duration::from_micros(100));
        let count = |bytes: &[u8]| u64::from_le_bytes(bytes.try_into().expect("validated"));
        *older = (count(older) + count(newer)).to_le_bytes().to_vec();
        Ok(())
    }

    fn validate(&self, _kind: Kind, value: &[u8]) -> spillway_core::Result<()> {
        if value.len() == 8 {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "a count is 8 bytes, not {}",
                value.len()
            )))
        }
    }
}

/// Adds 1 to the count of each of keys `0..keys`, in one batch per round,
/// until at least `beside` root spills have run beside a rewrite (at least
/// 20 rounds, at most 500; fails if too few did); returns the rounds.
pub fn count_until_spills_beside_rewrites(store: &Store, keys: u64, beside: u64) -> u64 {
    let mut rounds = 0;
    while rounds < 20 || (rounds < 500 && store.stats().spills_beside_rewrites < beside) {
        let mut batch = WriteBatch::new();
        for i in 0..keys {
            batch.merge(&key(i), &1u64.to_le_bytes());
        }
        store.write(&batch).unwrap();
        rounds += 1;
    }
    let stats = store.stats();
    assert!(stats.spills_beside_rewrites >= beside, "{stats:?}");
    rounds
}

/// Checks that each of keys `0..keys` was counted `rounds` times.
pub fn assert_counted(store: &Store, keys: u64, rounds: u64) {
    for i in 0..keys {
        let value = store.get(&key(i)).unwrap().expect("every key was counted");
        assert_eq!(u64::from_le_bytes(value.try_into().unwrap()), rounds, "key {i}");
    }
}
