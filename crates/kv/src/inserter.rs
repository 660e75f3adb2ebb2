//! The root inserter: a thread that puts a logged batch into the active
//! root buffer while its writer waits for the log's disk.
//!
//! A synced write waits for two device round trips (the log's direct
//! write, then its flush): about 100 us on an idle disk, twice that while
//! spills write. Putting a batch of 1000 small records into the root's
//! hash table is about 25 us of cache misses besides, which the writer
//! would spend after its log write. Handed to this thread once the batch
//! is logged, the insert is done by the time the flush answers.
//!
//! Batches are queued under the writers' lock, so they are inserted in
//! log order; a writer returns only once its batch is in (a GET after a
//! write sees it), and a root is frozen only once everything queued is in
//! (its records belong to that root's log). Small batches are inserted by
//! their writer: the hand-over costs more than they do.

use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

use spillway_core::{Error, Result};

use crate::batch::WriteBatch;
use crate::store::lock;

/// Batches of fewer records are inserted by their writer.
pub const RECORDS_MIN: usize = 256;
/// Batches queued at most (writers wait for room beyond).
const QUEUE_CAPACITY: usize = 16;

/// The queue to the inserter thread and what it has done.
#[derive(Debug)]
pub struct Inserter {
    /// `None` once stopped.
    jobs: Mutex<Option<SyncSender<WriteBatch>>>,
    /// The thread's end of the queue, until [`start`](Self::start) hands
    /// it over.
    queue: Mutex<Option<Receiver<WriteBatch>>>,
    /// The thread, joined by [`stop`](Self::stop).
    thread: Mutex<Option<JoinHandle<()>>>,
    state: Mutex<State>,
    /// Signalled after each insert, and when the thread ends.
    inserted: Condvar,
}

#[derive(Debug, Default)]
struct State {
    /// Batches queued since the start; a batch's ticket is its number.
    queued: u64,
    /// Batches inserted, in queue order.
    inserted: u64,
    /// Inserted batches, emptied, for writers to refill without allocating.
    spares: Vec<WriteBatch>,
    /// The thread ended: nothing more gets inserted.
    ended: bool,
}

impl Inserter {
    /// A queue whose thread is not started yet.
    pub fn new() -> Arc<Inserter> {
        let (jobs, queue) = mpsc::sync_channel(QUEUE_CAPACITY);
        Arc::new(Inserter {
            jobs: Mutex::new(Some(jobs)),
            queue: Mutex::new(Some(queue)),
            thread: Mutex::new(None),
            state: Mutex::new(State::default()),
            inserted: Condvar::new(),
        })
    }

    /// Starts the thread, which calls `insert` with each queued batch
    /// until [`stop`](Self::stop).
    pub fn start(self: &Arc<Self>, insert: impl Fn(&WriteBatch) + Send + 'static) -> Result<()> {
        let queue = lock(&self.queue).take().expect("an inserter is started once");
        let thread = self.clone();
        let handle = std::thread::Builder::new()
            .name("spillway-kv-insert".into())
            .spawn(move || thread.run(&queue, insert))
            .map_err(|error| Error::io("starting the key-value store's root inserter thread", error))?;
        *lock(&self.thread) = Some(handle);
        Ok(())
    }

    fn run(&self, queue: &Receiver<WriteBatch>, insert: impl Fn(&WriteBatch)) {
        /// Marks the thread ended however it ends, a panic included, so
        /// that no writer waits for it forever.
        struct Ended<'a>(&'a Inserter);
        impl Drop for Ended<'_> {
            fn drop(&mut self) {
                lock(&self.0.state).ended = true;
                self.0.inserted.notify_all();
            }
        }
        let _ended = Ended(self);
        while let Ok(mut batch) = queue.recv() {
            insert(&batch);
            batch.clear();
            let mut state = lock(&self.state);
            state.inserted += 1;
            state.spares.push(batch);
            drop(state);
            self.inserted.notify_all();
        }
    }

    /// Queues a copy of `batch` (called under the writers' lock, which
    /// orders the queue as the log); returns its ticket for
    /// [`wait`](Self::wait).
    pub fn queue(&self, batch: &WriteBatch) -> Result<u64> {
        let (mut copy, ticket) = {
            let mut state = lock(&self.state);
            state.queued += 1;
            (state.spares.pop().unwrap_or_default(), state.queued)
        };
        copy.copy_from(batch);
        let jobs = lock(&self.jobs);
        let sent = jobs.as_ref().is_some_and(|jobs| jobs.send(copy).is_ok());
        if !sent {
            lock(&self.state).queued -= 1;
            return Err(stopped());
        }
        Ok(ticket)
    }

    /// Waits until the batch with `ticket`, and every one before it, is
    /// in the root.
    pub fn wait(&self, ticket: u64) -> Result<()> {
        let mut state = lock(&self.state);
        while state.inserted < ticket {
            if state.ended {
                return Err(stopped());
            }
            state = self.inserted.wait(state).unwrap_or_else(PoisonError::into_inner);
        }
        Ok(())
    }

    /// Waits until everything queued is in the root.
    pub fn drain(&self) -> Result<()> {
        let queued = lock(&self.state).queued;
        self.wait(queued)
    }

    /// Lets the thread end once the queue is empty, and waits for it;
    /// an error if it panicked.
    pub fn stop(&self) -> Result<()> {
        lock(&self.jobs).take();
        let Some(handle) = lock(&self.thread).take() else {
            return Ok(());
        };
        handle
            .join()
            .map_err(|_| Error::Internal("the key-value store's root inserter thread panicked".into()))
    }
}

fn stopped() -> Error {
    Error::Internal("the key-value store's root inserter thread stopped".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn batch_of(records: u64) -> WriteBatch {
        let mut batch = WriteBatch::new();
        for n in 0..records {
            batch.put(&n.to_le_bytes(), b"v");
        }
        batch
    }

    #[test]
    fn batches_are_inserted_in_queue_order_and_waits_see_them() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let inserter = Inserter::new();
        inserter
            .start(move |batch: &WriteBatch| lock(&log).push(batch.len()))
            .unwrap();
        let mut tickets = Vec::new();
        for records in 1..=40 {
            tickets.push(inserter.queue(&batch_of(records)).unwrap());
        }
        inserter.wait(tickets[9]).unwrap();
        assert!(lock(&seen).len() >= 10);
        inserter.drain().unwrap();
        assert_eq!(*lock(&seen), (1..=40).map(|n| n as usize).collect::<Vec<_>>());
        assert_eq!(tickets, (1..=40).collect::<Vec<u64>>());
        // Spares are reused: no more batches exist than can be in flight
        // (the queue's, the one being inserted, the one being queued).
        assert!(lock(&inserter.state).spares.len() <= QUEUE_CAPACITY + 2);
        inserter.stop().unwrap();
        assert_eq!(
            inserter.queue(&batch_of(1)).unwrap_err().kind(),
            spillway_core::ErrorKind::Internal
        );
    }

    #[test]
    fn a_panicking_insert_fails_the_waiters_instead_of_hanging_them() {
        let calls = AtomicU64::new(0);
        let inserter = Inserter::new();
        inserter
            .start(move |_: &WriteBatch| {
                if calls.fetch_add(1, Ordering::SeqCst) == 1 {
                    panic!("an insert failed");
                }
            })
            .unwrap();
        let first = inserter.queue(&batch_of(3)).unwrap();
        let second = inserter.queue(&batch_of(3)).unwrap();
        inserter.wait(first).unwrap();
        let error = inserter.wait(second).unwrap_err();
        assert!(error.to_string().contains("inserter thread stopped"), "{error}");
        assert!(inserter.stop().is_err());
    }
}
