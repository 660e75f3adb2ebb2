//! The worker: what a stage body sees, its only way to block (see
//! `context.rs` for the hot path of `recv` and `send`).

use std::fmt;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, TryRecvError, TrySendError};
use spillway_core::{Error, Result};

use crate::context::WorkerContext;
use crate::disk::{DiskScheduler, ReadToken, WriteToken};
use crate::memory::{Allocation, BufferPool, MemoryQuota, PooledBuffer};
use crate::queue::{Consumer, ErasedEnd, Producer, QueueInfo};
use crate::unit::WorkUnit;

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
    pub(crate) fn new(ends: QueueEnds, cx: WorkerContext) -> Self {
        Self { ends, cx }
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
        let depth_max = &mut self.cx.depth_max[to.queue];
        if depth > *depth_max {
            *depth_max = depth;
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
                info.depth_max.fetch_max(cx.depth_max[queue], Ordering::Relaxed);
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
