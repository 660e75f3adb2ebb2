//! Insert timing without a clock read per insert.

use std::time::{Duration, Instant};

/// Inserts between clock reads: a read costs about as much as a small
/// insert, so reading it on every insert would cost a tenth of the work.
const INSERTS_PER_READ: u64 = 1024;

/// The wall time spanned by inserts: from the first insert to the latest
/// clock read, which happens every [`INSERTS_PER_READ`] inserts and at the
/// end of every batch. It includes whatever the caller did between
/// inserts, so inserts per second over it is the ingest rate.
#[derive(Debug, Clone, Default)]
pub(crate) struct InsertClock {
    first: Option<Instant>,
    latest: Option<Instant>,
    ticks: u64,
}

impl InsertClock {
    /// Counts one insert, reading the clock on the first and then every
    /// [`INSERTS_PER_READ`].
    pub(crate) fn tick(&mut self) {
        if self.ticks.is_multiple_of(INSERTS_PER_READ) {
            self.read();
        }
        self.ticks += 1;
    }

    /// Reads the clock now (at the end of a batch).
    pub(crate) fn read(&mut self) {
        let now = Instant::now();
        self.first.get_or_insert(now);
        self.latest = Some(now);
    }

    /// The time spanned so far.
    pub(crate) fn elapsed(&self) -> Duration {
        match (self.first, self.latest) {
            (Some(first), Some(latest)) => latest - first,
            _ => Duration::ZERO,
        }
    }
}
