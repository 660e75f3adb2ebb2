//! What the tests of damage and recovery share: a random source, a
//! model of the writes, and copies of a store's files between file
//! systems.

#![allow(dead_code)] // each test file uses its part

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use spillway_core::{Fs, SimFs};
use spillway_stream::{Bounds, Op, Records};

pub const DIR: &str = "/store";

/// xorshift64*: enough randomness for tests, no dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub type Row = (u64, u64, u64, Vec<u8>);

/// Every acknowledged write in order; its position is its sequence number.
#[derive(Default, Clone)]
pub struct Model {
    pub writes: Vec<(Op, u64, u64, Vec<u8>)>,
}

impl Model {
    /// The live records among the writes `keep` keeps, newest wins.
    pub fn live_of(&self, bounds: &Bounds, keep: impl Fn(u64) -> bool) -> Vec<Row> {
        let mut live = Vec::new();
        for (seq, (op, key, time, value)) in self.writes.iter().enumerate() {
            let seq = seq as u64;
            if *op == Op::Delete || !bounds.contains(*key, *time) || !keep(seq) {
                continue;
            }
            let replaced =
                self.writes[seq as usize + 1..]
                    .iter()
                    .enumerate()
                    .any(|(later, (op, k, t, _))| {
                        op.shadows() && (k, t) == (key, time) && keep(seq + 1 + later as u64)
                    });
            if !replaced {
                live.push((*key, *time, seq, value.clone()));
            }
        }
        live.sort();
        live
    }

    pub fn live(&self, bounds: &Bounds) -> Vec<Row> {
        self.live_of(bounds, |_| true)
    }
}

pub fn rows(records: &Records) -> Vec<Row> {
    (0..records.len())
        .map(|i| {
            (
                records.keys[i],
                records.times[i],
                records.seqs[i],
                records.value(i).to_vec(),
            )
        })
        .collect()
}

/// Every file of the store's directory and its bytes.
pub fn files(fs: &SimFs) -> BTreeMap<String, Vec<u8>> {
    let dir = Path::new(DIR);
    fs.list_dir(dir)
        .unwrap()
        .into_iter()
        .filter(|name| !fs.is_dir(&dir.join(name)).unwrap())
        .map(|name| {
            let file = fs.open_read(&dir.join(&name)).unwrap();
            let mut bytes = Vec::new();
            file.read_exact_append(&mut bytes, file.len().unwrap() as usize, 0)
                .unwrap();
            (name, bytes)
        })
        .collect()
}

/// A new file system holding `files` in the store's directory, durable.
pub fn file_system(files: &BTreeMap<String, Vec<u8>>) -> Arc<SimFs> {
    let fs = Arc::new(SimFs::new());
    let dir = Path::new(DIR);
    fs.create_dir_all(dir).unwrap();
    for (name, bytes) in files {
        let file = fs.create_or_truncate(&dir.join(name)).unwrap();
        file.write_at(bytes, 0).unwrap();
        file.sync_data().unwrap();
    }
    fs.sync_dir(dir).unwrap();
    fs
}
