//! Inserting pairs: the one path every engine's `insert` and
//! `insert_batch` take (the CBT, the parallel CBT and the hash
//! aggregator differ only in how they fold one pair in).

use spillway_core::{ErrorKind, Interrupt, Result};

use crate::admission::{at_position, INTERRUPT_CHECK_PAIRS};
use crate::clock::InsertClock;
use crate::value::Value;

/// An engine that folds pairs in one at a time.
pub(crate) trait Ingest {
    /// The clock that times the engine's inserts.
    fn insert_clock(&mut self) -> &mut InsertClock;

    /// The interrupt a batch of inserts checks.
    fn insert_interrupt(&self) -> &Interrupt;

    /// Folds `value` into `key`'s state. A refused value changes nothing,
    /// and the error names the key.
    fn insert_one(&mut self, key: &[u8], value: Value<'_>) -> Result<()>;
}

/// One insert, timed.
#[inline]
pub(crate) fn insert<E: Ingest>(engine: &mut E, key: &[u8], value: Value<'_>) -> Result<()> {
    engine.insert_clock().tick();
    engine.insert_one(key, value)
}

/// Inserts every pair in order, checking the engine's interrupt every
/// [`INTERRUPT_CHECK_PAIRS`] pairs. Stops at the first error, which names
/// the pair's position and key (the pairs before it were inserted); an
/// interrupt names neither (it stops the batch wherever it is), nor does a
/// failure of records accepted earlier (`Poisoned`).
pub(crate) fn insert_batch<'a, E: Ingest>(
    engine: &mut E,
    pairs: impl IntoIterator<Item = (&'a [u8], Value<'a>)>,
) -> Result<()> {
    let interrupt = engine.insert_interrupt().clone();
    let outcome = insert_pairs(pairs, &interrupt, |key, value| {
        engine.insert_clock().tick();
        engine.insert_one(key, value)
    });
    engine.insert_clock().read();
    outcome
}

fn insert_pairs<'a>(
    pairs: impl IntoIterator<Item = (&'a [u8], Value<'a>)>,
    interrupt: &Interrupt,
    mut insert: impl FnMut(&'a [u8], Value<'a>) -> Result<()>,
) -> Result<()> {
    let mut pairs = pairs.into_iter();
    let mut position = 0;
    loop {
        interrupt.check()?;
        // A chunk at a time: the loop over a chunk is the insert alone.
        let chunk_end = position + INTERRUPT_CHECK_PAIRS;
        for (key, value) in pairs.by_ref().take(INTERRUPT_CHECK_PAIRS) {
            if let Err(error) = insert(key, value) {
                return Err(match error.kind() {
                    ErrorKind::Interrupted | ErrorKind::Poisoned => error,
                    _ => at_position(error, position, key, true),
                });
            }
            position += 1;
        }
        if position < chunk_end {
            return Ok(());
        }
    }
}
