//! Helpers shared by the store's integration tests.

#![allow(dead_code)]

use std::collections::BTreeMap;

use spillway_core::Limits;
use spillway_kv::{Options, Store, SyncMode};

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
