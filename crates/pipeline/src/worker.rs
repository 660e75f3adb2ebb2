//! The worker: what a stage body sees, and the per-worker state the phase's
//! monitor reads.
//!
//! # Hot path
//! `recv` and `send` first try the channel without blocking; only when that
//! fails do they record a wait (one uncontended per-worker mutex), block on
//! the channel *and* the phase's cancellation channel, and time the wait.
//! The counters are plain fields mirrored into per-worker relaxed atomics
//! that only this worker writes, so no cache line is shared between workers
//! per unit except the channel's own.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError, TrySendError};
use spillway_core::sync;
use spillway_core::{Error, Result};

use crate::disk::{DiskScheduler, ReadToken, WriteToken};
use crate::memory::{Allocation, BufferPool, MemoryQuota, PooledBuffer};
use crate::phase::PhaseShared;
use crate::queue::{Consumer, ErasedEnd, Producer, QueueInfo};
use crate::unit::WorkUnit;

/// The three kinds of blocked time a stage reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Blocked {
    /// Waiting for a unit to arrive, or for a read token.
    Input = 0,
    /// Waiting for room in a full queue, or for a write token.
    Output = 1,
    /// Waiting for quota memory or a pooled buffer.
    Memory = 2,
}

/// What a blocked worker waits for; published in its slot so the deadlock
/// detector can tell "blocked" from "working" and say what is missing.
#[derive(Debug, Clone)]
pub(crate) enum Wait {
    /// A unit from the queue with this id (the queue is empty).
    Input { queue: usize },
    /// Room in the queue with this id (the queue is full).
    Output { queue: usize },
    /// `requested` bytes of `quota`.
    Memory { quota: MemoryQuota, requested: u64 },
    /// A buffer from `pool`.
    Buffer { pool: BufferPool },
    /// A write token for `disk`.
    WriteToken { disks: DiskScheduler, disk: usize },
    /// A read token for `disk`.
    ReadToken { disks: DiskScheduler, disk: usize },
}

impl Wait {
    /// A number that changes whenever the awaited resource changes hands,
    /// so that a freed byte of quota or a returned token resets the
    /// detector's window even if no blocked worker could use it yet.
    pub(crate) fn resource_state(&self) -> u64 {
        match self {
            Wait::Input { .. } | Wait::Output { .. } => 0,
            Wait::Memory { quota, .. } => quota.generation(),
            Wait::Buffer { pool } => pool.available() as u64,
            Wait::WriteToken { disks, disk } | Wait::ReadToken { disks, disk } => disks.generation(*disk),
        }
    }

    /// One line saying what is awaited and how much of it there is.
    pub(crate) fn describe(&self, queues: &[QueueInfo]) -> String {
        match self {
            Wait::Input { queue } => {
                let info = &queues[*queue];
                format!(
                    "waits for input from queue '{}' (empty; {} writer worker(s) of stage(s) {} still running)",
                    info.name,
                    info.live_writers.load(Ordering::Relaxed),
                    quoted_list(&info.writer_stages),
                )
            }
            Wait::Output { queue } => {
                let info = &queues[*queue];
                format!(
                    "waits for room in queue '{}' (full: {} of {} units)",
                    info.name, info.capacity, info.capacity
                )
            }
            Wait::Memory { quota, requested } => format!(
                "waits for {requested} bytes of memory quota '{}' ({} of {} bytes free)",
                quota.name(),
                quota.available(),
                quota.capacity_bytes()
            ),
            Wait::Buffer { pool } => format!(
                "waits for a buffer from pool '{}' ({} of {} buffers free)",
                pool.name(),
                pool.available(),
                pool.buffers()
            ),
            Wait::WriteToken { disks, disk } => format!(
                "waits for a write token of disk {disk} ({} of {} write tokens held, {} reads in flight)",
                disks.writes_in_flight(*disk),
                disks.write_tokens_per_disk(),
                disks.reads_in_flight(*disk)
            ),
            Wait::ReadToken { disks, disk } => format!(
                "waits for a read token of disk {disk} ({} writes in flight)",
                disks.writes_in_flight(*disk)
            ),
        }
    }

    fn blocked(&self) -> Blocked {
        match self {
            Wait::Input { .. } | Wait::ReadToken { .. } => Blocked::Input,
            Wait::Output { .. } | Wait::WriteToken { .. } => Blocked::Output,
            Wait::Memory { .. } | Wait::Buffer { .. } => Blocked::Memory,
        }
    }
}

fn quoted_list(names: &[String]) -> String {
    names
        .iter()
        .map(|name| format!("'{name}'"))
        .collect::<Vec<_>>()
        .join(", ")
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

/// The channel ends of one worker, indexed by queue id: only the queues its
/// stage declared.
pub(crate) struct QueueEnds {
    pub(crate) phase_id: u64,
    pub(crate) senders: Vec<Option<Box<dyn ErasedEnd>>>,
    pub(crate) receivers: Vec<Option<Box<dyn ErasedEnd>>>,
}

impl QueueEnds {
    fn receiver<T: WorkUnit>(&self, from: &Consumer<T>, stage: &str) -> Result<&Receiver<T>> {
        if from.phase_id != self.phase_id {
            spillway_core::bail!(InvalidArgument, "queue '{}' belongs to another phase", from.name);
        }
        match self.receivers.get(from.queue).and_then(Option::as_ref) {
            Some(end) => end
                .as_any()
                .downcast_ref::<Receiver<T>>()
                .ok_or_else(|| Error::Internal(format!("queue '{}' has another unit type", from.name))),
            None => Err(Error::InvalidArgument(format!(
                "stage '{stage}' reads queue '{}' without declaring it (StageSpec::reads)",
                from.name
            ))),
        }
    }

    fn sender<T: WorkUnit>(&self, to: &Producer<T>, stage: &str) -> Result<&Sender<T>> {
        if to.phase_id != self.phase_id {
            spillway_core::bail!(InvalidArgument, "queue '{}' belongs to another phase", to.name);
        }
        match self.senders.get(to.queue).and_then(Option::as_ref) {
            Some(end) => end
                .as_any()
                .downcast_ref::<Sender<T>>()
                .ok_or_else(|| Error::Internal(format!("queue '{}' has another unit type", to.name))),
            None => Err(Error::InvalidArgument(format!(
                "stage '{stage}' writes queue '{}' without declaring it (StageSpec::writes)",
                to.name
            ))),
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
    max_depth: Vec<usize>,
}

impl WorkerContext {
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

    fn counted_in(&mut self, bytes: u64) {
        self.units_in += 1;
        self.bytes_in += bytes;
        self.slot.units_in.store(self.units_in, Ordering::Relaxed);
        self.slot.bytes_in.store(self.bytes_in, Ordering::Relaxed);
    }

    fn counted_out(&mut self, bytes: u64) {
        self.units_out += 1;
        self.bytes_out += bytes;
        self.slot.units_out.store(self.units_out, Ordering::Relaxed);
        self.slot.bytes_out.store(self.bytes_out, Ordering::Relaxed);
    }

    #[cold]
    fn recv_blocking<T>(&mut self, receiver: &Receiver<T>, queue: usize) -> Result<Option<T>> {
        let started = self.begin_wait(Wait::Input { queue });
        let outcome = crossbeam_channel::select! {
            recv(receiver) -> message => Some(message.ok()),
            recv(self.cancel) -> _ => None,
        };
        self.end_wait(started);
        outcome.ok_or_else(|| self.phase.cancellation_error())
    }

    #[cold]
    fn send_blocking<T>(&mut self, sender: &Sender<T>, to: &Producer<T>, unit: T) -> Result<()> {
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
    fn no_reader_error(&self, queue: &str) -> Error {
        if self.cancelled() {
            return self.phase.cancellation_error();
        }
        Error::InvalidArgument(format!(
            "queue '{queue}' has no reader left: every worker of the stages that read it returned \
             (a reader stage must drain its queues until recv returns None)"
        ))
    }
}

/// One worker thread of a stage, handed to the stage body.
///
/// Every way a worker can block goes through a method here, so that the
/// phase can (1) account the time as blocked on input, output or memory,
/// (2) see which workers are blocked and on what (deadlock detection) and
/// (3) wake them when the phase fails. A body that blocks elsewhere (a lock,
/// a socket) is counted as busy and is invisible to the detector.
///
/// # Thread safety
/// Owned by its thread; the body gets `&mut Worker` and cannot keep it.
pub struct Worker {
    ends: QueueEnds,
    cx: WorkerContext,
}

impl fmt::Debug for Worker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("phase", &self.cx.phase.name())
            .field("stage", &self.cx.stage)
            .field("index", &self.cx.index)
            .field("workers", &self.cx.workers)
            .finish_non_exhaustive()
    }
}

impl Worker {
    pub(crate) fn new(
        ends: QueueEnds,
        phase: Arc<PhaseShared>,
        slot: Arc<WorkerSlot>,
        cancel: Receiver<()>,
        stage: Arc<str>,
        workers: usize,
        queues: usize,
    ) -> Self {
        let index = slot.index;
        Self {
            ends,
            cx: WorkerContext {
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
                max_depth: vec![0; queues],
            },
        }
    }

    /// The name of this worker's stage (for logs and file names).
    pub fn stage(&self) -> &str {
        &self.cx.stage
    }

    /// This worker's index within its stage, `0..workers()`: lets a stage
    /// split its input (worker `i` reads files `i, i + n, ...`) or own a disk.
    pub fn index(&self) -> usize {
        self.cx.index
    }

    /// How many workers the stage has.
    pub fn workers(&self) -> usize {
        self.cx.workers
    }

    /// The name of the phase.
    pub fn phase(&self) -> &str {
        self.cx.phase.name()
    }

    /// Whether the phase is being torn down after an error: a long
    /// computation between `recv`/`send` calls can poll this to stop early.
    pub fn is_cancelled(&self) -> bool {
        self.cx.cancelled()
    }

    /// Fails with (a copy of) the phase's first error if the phase is being
    /// torn down; the `?`-friendly form of [`is_cancelled`](Self::is_cancelled).
    pub fn check_cancelled(&self) -> Result<()> {
        self.cx.check_cancelled()
    }

    /// The next unit of `from`, or `None` once every worker of every stage
    /// that writes the queue has returned and the queue is drained.
    ///
    /// Time spent waiting counts as blocked on input. Fails with (a copy of)
    /// the phase's first error if the phase is being torn down, also when the
    /// queue closed because a writer failed, so a reader never mistakes a
    /// failed writer for a complete input. Fails with `InvalidArgument` if
    /// the stage did not declare that it reads `from`.
    pub fn recv<T: WorkUnit>(&mut self, from: &Consumer<T>) -> Result<Option<T>> {
        self.cx.check_cancelled()?;
        let receiver = self.ends.receiver(from, &self.cx.stage)?;
        let unit = match receiver.try_recv() {
            Ok(unit) => Some(unit),
            Err(TryRecvError::Disconnected) => None,
            Err(TryRecvError::Empty) => self.cx.recv_blocking(receiver, from.queue)?,
        };
        match unit {
            Some(unit) => {
                self.cx.counted_in(unit.bytes());
                Ok(Some(unit))
            }
            None => {
                // The writers' failure is published before their channel ends drop.
                self.cx.check_cancelled()?;
                Ok(None)
            }
        }
    }

    /// Puts `unit` on `to`, waiting while the queue is full (back-pressure).
    ///
    /// Time spent waiting counts as blocked on output. Fails if the phase is
    /// being torn down (the unit is dropped), if every reader worker of the
    /// queue has returned, or if the stage did not declare that it writes `to`.
    pub fn send<T: WorkUnit>(&mut self, to: &Producer<T>, unit: T) -> Result<()> {
        self.cx.check_cancelled()?;
        let sender = self.ends.sender(to, &self.cx.stage)?;
        let bytes = unit.bytes();
        match sender.try_send(unit) {
            Ok(()) => {}
            Err(TrySendError::Full(unit)) => self.cx.send_blocking(sender, to, unit)?,
            Err(TrySendError::Disconnected(_)) => return Err(self.cx.no_reader_error(&to.name)),
        }
        self.cx.counted_out(bytes);
        let depth = sender.len();
        let max_depth = &mut self.cx.max_depth[to.queue];
        if depth > *max_depth {
            *max_depth = depth;
        }
        Ok(())
    }

    /// `bytes` of `quota`, waiting while fewer are free (counted as blocked
    /// on memory). A request larger than the whole quota fails at once with
    /// `ResourcesExhausted` naming the quota, since no amount of waiting can
    /// grant it. The bytes go back when the [`Allocation`] drops.
    pub fn allocate(&mut self, quota: &MemoryQuota, bytes: u64) -> Result<Allocation> {
        self.cx.check_cancelled()?;
        quota.allocate_waiting(bytes, &mut self.cx)
    }

    /// A buffer from `pool`, waiting while none is free (counted as blocked
    /// on memory). The buffer goes back, cleared, when it drops.
    pub fn take(&mut self, pool: &BufferPool) -> Result<PooledBuffer> {
        self.cx.check_cancelled()?;
        pool.take_waiting(&mut self.cx)
    }

    /// A token to write to `disk`, waiting while the disk has no free write
    /// token or (with more than one disk) is being read. Counted as blocked
    /// on output. See [`DiskScheduler`] for the rules.
    pub fn write_token(&mut self, disks: &DiskScheduler, disk: usize) -> Result<WriteToken> {
        self.cx.check_cancelled()?;
        disks.write_token_waiting(disk, &mut self.cx)
    }

    /// A token to read from `disk`, waiting (with more than one disk) while
    /// it is being written. Counted as blocked on input.
    pub fn read_token(&mut self, disks: &DiskScheduler, disk: usize) -> Result<ReadToken> {
        self.cx.check_cancelled()?;
        disks.read_token_waiting(disk, &mut self.cx)
    }

    /// Counts one unit of `bytes` read from outside the phase (a source
    /// stage reading files), so the source stage has a throughput too.
    pub fn count_in(&mut self, bytes: u64) {
        self.cx.counted_in(bytes);
    }

    /// Counts one unit of `bytes` leaving the phase (a sink stage writing
    /// files).
    pub fn count_out(&mut self, bytes: u64) {
        self.cx.counted_out(bytes);
    }

    /// Called by the runtime once the body has returned and any failure has
    /// been published: records the wall time, closes the queues this worker
    /// was the last writer of (by dropping its channel ends) and, if it was
    /// the last reader of a queue that still holds units, fails the phase.
    pub(crate) fn retire(self, wall: Duration, queues: &[QueueInfo]) {
        let Worker { ends, cx } = self;
        for (queue, end) in ends.senders.iter().enumerate() {
            if end.is_some() {
                let info = &queues[queue];
                info.max_depth.fetch_max(cx.max_depth[queue], Ordering::Relaxed);
                info.live_writers.fetch_sub(1, Ordering::AcqRel);
            }
        }
        for (queue, end) in ends.receivers.iter().enumerate() {
            let Some(end) = end else { continue };
            let info = &queues[queue];
            let last_reader = info.live_readers.fetch_sub(1, Ordering::AcqRel) == 1;
            let left = end.len();
            if last_reader && left > 0 && !cx.cancelled() {
                cx.phase.fail(Error::InvalidArgument(format!(
                    "stage '{}' worker {}: returned as the last reader of queue '{}' while it still held \
                     {left} unit(s); a reader stage must drain its queues until recv returns None",
                    cx.stage, cx.index, info.name
                )));
            }
        }
        let wall_nanos = u64::try_from(wall.as_nanos()).unwrap_or(u64::MAX);
        cx.slot.wall_nanos.store(wall_nanos, Ordering::Relaxed);
        cx.slot.finished.store(true, Ordering::Release);
        // Dropping `ends` drops this worker's `Sender`s: the last writer's
        // drop closes the channel.
        drop(ends);
    }
}
