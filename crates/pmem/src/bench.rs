//! A PiBench-style run on one table: inserts of `keys` distinct keys, then
//! positive searches, negative searches and deletes of them all, each phase
//! timed and its flushes and fences counted. The command line's `pmem bench`
//! and the benchmark harness run it.

use std::time::Instant;

use spillway_core::{ensure, Interrupt, Result};

use crate::table::Table;

/// One phase's figures.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Phase {
    pub name: &'static str,
    pub operations: u64,
    pub seconds: f64,
    pub operations_per_s: f64,
    pub flushes_per_operation: f64,
    pub fences_per_operation: f64,
}

/// The key of rank `i` in a run seeded by `seed`: distinct for distinct
/// ranks (an odd multiplier is a bijection on u64), spread over the hash.
fn key(i: u64, seed: u64) -> u64 {
    (i ^ seed).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// Runs the four phases on `table` (which should be empty); stops with
/// `Interrupted` between batches of 4,096 operations when asked.
pub fn run(table: &Table, keys: u64, seed: u64, interrupt: &Interrupt) -> Result<Vec<Phase>> {
    let negative = seed ^ 0x5555_5555_5555_5555;
    let mut phases = Vec::new();
    let mut phase = |name: &'static str, body: &mut dyn FnMut(u64) -> Result<()>| -> Result<()> {
        let before = table.stats();
        let started = Instant::now();
        for batch in (0..keys).step_by(4096) {
            interrupt.check()?;
            for i in batch..(batch + 4096).min(keys) {
                body(i)?;
            }
        }
        let seconds = started.elapsed().as_secs_f64();
        let after = table.stats();
        let per = |count: u64| count as f64 / keys.max(1) as f64;
        phases.push(Phase {
            name,
            operations: keys,
            seconds,
            operations_per_s: keys as f64 / seconds.max(1e-9),
            flushes_per_operation: per(after.flushes - before.flushes),
            fences_per_operation: per(after.fences - before.fences),
        });
        Ok(())
    };
    phase("insert", &mut |i| table.insert(key(i, seed), i).map(drop))?;
    phase("search", &mut |i| {
        let found = table.get(key(i, seed));
        ensure!(
            found == Some(i),
            Internal,
            "the key of rank {i} was inserted but reads {found:?}"
        );
        Ok(())
    })?;
    // Negative keys are the ranks under another seed: one meets a stored
    // key only if two ranks differ by 0x5555...5555, past any run's size.
    phase("negative search", &mut |i| {
        let found = table.get(key(i, negative));
        ensure!(
            found.is_none(),
            Internal,
            "a key never inserted (rank {i}) reads {found:?}"
        );
        Ok(())
    })?;
    phase("delete", &mut |i| {
        table.remove(key(i, seed));
        Ok(())
    })?;
    Ok(phases)
}
