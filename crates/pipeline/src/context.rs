//! The state a running phase shares with its workers, and the part of a
//! worker that the resources it waits on use.
//!
//! Quotas, pools and disk schedulers block a worker through its
//! [`WorkerContext`]: it publishes the wait in the worker's [`WorkerSlot`]
//! (which the monitor and the report read), times it, and fails with the
//! phase's first error when the phase is torn down. Everything here stands
//! below the resources and the `Worker` handle that stage bodies see.
//!
//! # Hot path
//! `recv` and `send` first try the channel without blocking; only when that
//! fails do they record a wait (one uncontended per-worker mutex), block on
//! the channel *and* the phase's cancellation channel, and time the wait.
//! The counters are plain fields mirrored into per-worker relaxed atomics
//! that only this worker writes, so no cache line is shared between workers
//! per unit except the channel's own.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use spillway_core::{sync, Error, Result};

use crate::queue::Producer;
use crate::wait::{Blocked, Wait};

/// The state every worker of a running phase shares: the first error and
/// the cancellation it triggers.
///
/// # Invariants
/// `cancelled` becomes true only after `first_error` is set, and the
/// cancellation channel is disconnected only after that; so whoever sees the
/// phase cancelled finds the error.
pub(crate) struct PhaseShared {
    name: String,
    cancelled: AtomicBool,
    first_error: Mutex<Option<Error>>,
    /// Dropped on cancellation, which disconnects every worker's receiver
    /// and wakes the channel waits.
    cancel_sender: Mutex<Option<Sender<()>>>,
}

impl PhaseShared {
    /// The shared state of the phase `name`, whose workers' cancellation
    /// receivers disconnect when `cancel_sender` is dropped.
    pub(crate) fn new(name: String, cancel_sender: Sender<()>) -> Self {
        PhaseShared {
            name,
            cancelled: AtomicBool::new(false),
            first_error: Mutex::new(None),
            cancel_sender: Mutex::new(Some(cancel_sender)),
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Acquire)
    }

    /// Records `error` if it is the first, and cancels the phase.
    pub(crate) fn fail(&self, error: Error) {
        {
            let mut first_error = sync::lock(&self.first_error);
            if first_error.is_none() {
                *first_error = Some(error);
            }
        }
        self.cancelled.store(true, Ordering::Release);
        drop(sync::lock(&self.cancel_sender).take());
    }

    /// What a worker woken by the cancellation gets: a copy of the first
    /// error (same kind, same errno), saying that the phase was cancelled.
    pub(crate) fn cancellation_error(&self) -> Error {
        let context = format!("phase '{}' was cancelled by an earlier failure", self.name);
        match &*sync::lock(&self.first_error) {
            Some(error) => error.duplicate().context(context),
            None => Error::Internal(format!("{context}, but no failure was recorded")),
        }
    }

    pub(crate) fn take_error(&self) -> Option<Error> {
        sync::lock(&self.first_error).take()
    }
}

/// The part of a worker that the monitor and the report read while it runs.
///
/// # Thread safety
/// Every atomic has one writer (the worker) and is read with relaxed loads:
/// the monitor needs recent values, not a consistent snapshot.
#[derive(Debug)]
pub(crate) struct WorkerSlot {
    pub(crate) index: usize,
    pub(crate) units_in: AtomicU64,
    pub(crate) bytes_in: AtomicU64,
    pub(crate) units_out: AtomicU64,
    pub(crate) bytes_out: AtomicU64,
    /// Nanoseconds blocked, indexed by [`Blocked`].
    pub(crate) blocked_nanos: [AtomicU64; 3],
    /// Waits that ended (granted, closed or cancelled): progress for the
    /// deadlock detector even when no unit moved.
    pub(crate) waits_ended: AtomicU64,
    /// Wall time of the body in nanoseconds, set when it returns.
    pub(crate) wall_nanos: AtomicU64,
    pub(crate) finished: AtomicBool,
    pub(crate) wait: Mutex<Option<Wait>>,
}

impl WorkerSlot {
    pub(crate) fn new(index: usize) -> Self {
        Self {
            index,
            units_in: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            units_out: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
            blocked_nanos: Default::default(),
            waits_ended: AtomicU64::new(0),
            wall_nanos: AtomicU64::new(0),
            finished: AtomicBool::new(false),
            wait: Mutex::new(None),
        }
    }
}

/// Everything of a worker except its channel ends (split so that a borrowed
/// end and the mutable counters can be used together).
pub(crate) struct WorkerContext {
    pub(crate) phase: Arc<PhaseShared>,
    pub(crate) slot: Arc<WorkerSlot>,
    /// Disconnected when the phase is cancelled; selected on by every
    /// blocking channel operation.
    pub(crate) cancel: Receiver<()>,
    pub(crate) stage: Arc<str>,
    pub(crate) index: usize,
    pub(crate) workers: usize,
    units_in: u64,
    bytes_in: u64,
    units_out: u64,
    bytes_out: u64,
    blocked_nanos: [u64; 3],
    waits_ended: u64,
    /// Largest depth seen after a send, by queue id.
    pub(crate) depth_max: Vec<usize>,
}

impl WorkerContext {
    pub(crate) fn new(
        phase: Arc<PhaseShared>,
        slot: Arc<WorkerSlot>,
        cancel: Receiver<()>,
        stage: Arc<str>,
        workers: usize,
        queues: usize,
    ) -> Self {
        let index = slot.index;
        WorkerContext {
            phase,
            slot,
            cancel,
            stage,
            index,
            workers,
            units_in: 0,
            bytes_in: 0,
            units_out: 0,
            bytes_out: 0,
            blocked_nanos: [0; 3],
            waits_ended: 0,
            depth_max: vec![0; queues],
        }
    }

    /// Whether the phase is being torn down.
    pub(crate) fn cancelled(&self) -> bool {
        self.phase.is_cancelled()
    }

    /// Fails with a copy of the phase's first error if it is being torn down.
    pub(crate) fn check_cancelled(&self) -> Result<()> {
        if self.cancelled() {
            return Err(self.phase.cancellation_error());
        }
        Ok(())
    }

    /// Publishes `wait` and returns when it started.
    pub(crate) fn begin_wait(&self, wait: Wait) -> Instant {
        *sync::lock(&self.slot.wait) = Some(wait);
        Instant::now()
    }

    /// Ends the published wait and charges its time to its kind.
    pub(crate) fn end_wait(&mut self, started: Instant) {
        let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let kind = sync::lock(&self.slot.wait)
            .take()
            .map_or(Blocked::Input, |wait| wait.blocked());
        let total = &mut self.blocked_nanos[kind as usize];
        *total = total.saturating_add(nanos);
        self.slot.blocked_nanos[kind as usize].store(*total, Ordering::Relaxed);
        self.waits_ended += 1;
        self.slot.waits_ended.store(self.waits_ended, Ordering::Relaxed);
    }

    pub(crate) fn counted_in(&mut self, bytes: u64) {
        self.units_in += 1;
        self.bytes_in += bytes;
        self.slot.units_in.store(self.units_in, Ordering::Relaxed);
        self.slot.bytes_in.store(self.bytes_in, Ordering::Relaxed);
    }

    pub(crate) fn counted_out(&mut self, bytes: u64) {
        self.units_out += 1;
        self.bytes_out += bytes;
        self.slot.units_out.store(self.units_out, Ordering::Relaxed);
        self.slot.bytes_out.store(self.bytes_out, Ordering::Relaxed);
    }

    #[cold]
    pub(crate) fn recv_blocking<T>(&mut self, receiver: &Receiver<T>, queue: usize) -> Result<Option<T>> {
        let started = self.begin_wait(Wait::Input { queue });
        let outcome = crossbeam_channel::select! {
            recv(receiver) -> message => Some(message.ok()),
            recv(self.cancel) -> _ => None,
        };
        self.end_wait(started);
        outcome.ok_or_else(|| self.phase.cancellation_error())
    }

    #[cold]
    pub(crate) fn send_blocking<T>(&mut self, sender: &Sender<T>, to: &Producer<T>, unit: T) -> Result<()> {
        let started = self.begin_wait(Wait::Output { queue: to.queue });
        let outcome = crossbeam_channel::select! {
            send(sender, unit) -> sent => Some(sent.is_ok()),
            recv(self.cancel) -> _ => None,
        };
        self.end_wait(started);
        match outcome {
            Some(true) => Ok(()),
            Some(false) => Err(self.no_reader_error(&to.name)),
            None => Err(self.phase.cancellation_error()),
        }
    }

    #[cold]
    pub(crate) fn no_reader_error(&self, queue: &str) -> Error {
        if self.cancelled() {
            return self.phase.cancellation_error();
        }
        Error::InvalidArgument(format!(
            "queue '{queue}' has no reader left: every worker of the stages that read it returned \
             (a reader stage must drain its queues until recv returns None)"
        ))
    }
}
