//! Application-level memory management (Themis): byte quotas and pools of
//! preallocated buffers.
//!
//! Both make memory an explicit, bounded resource that a worker waits for,
//! instead of something the allocator hands out until the machine swaps:
//! a phase that runs out of memory slows down (back-pressure) rather than
//! spilling or crashing, and a phase that can never get memory is reported
//! by the deadlock detector.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use crossbeam_channel::{Receiver, Sender, TryRecvError};
use spillway_core::sync;
use spillway_core::{ensure, Result};

use crate::context::WorkerContext;
use crate::unit::WorkUnit;
use crate::wait::{Blocked, Resource, Wait, CANCEL_POLL};

/// A budget of bytes that workers allocate from and give back to (Themis's
/// Quota policy: one quota per producer-to-consumer edge, e.g. "Reader to
/// Converter 2 GB").
///
/// Requests are granted greedily: any request that fits in the free bytes is
/// granted at once, in no particular order among waiters. That can never
/// deadlock by itself but can starve a large request while small ones keep
/// fitting; size the quota to a few times the largest request.
///
/// # Thread safety
/// Cheap to clone (an `Arc`); all clones share one budget.
#[derive(Clone)]
pub struct MemoryQuota {
    inner: Arc<QuotaInner>,
}

struct QuotaInner {
    name: String,
    capacity: u64,
    state: Mutex<QuotaState>,
    freed: Condvar,
}

#[derive(Debug, Default)]
struct QuotaState {
    used: u64,
    peak: u64,
    /// Bumped on every grant and release.
    generation: u64,
}

impl fmt::Debug for MemoryQuota {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = sync::lock(&self.inner.state);
        f.debug_struct("MemoryQuota")
            .field("name", &self.inner.name)
            .field("capacity_bytes", &self.inner.capacity)
            .field("used_bytes", &state.used)
            .finish()
    }
}

impl MemoryQuota {
    /// A quota of `bytes` named `name` (the name appears in errors and in
    /// the deadlock report).
    pub fn new(name: &str, bytes: u64) -> Self {
        Self {
            inner: Arc::new(QuotaInner {
                name: name.to_string(),
                capacity: bytes,
                state: Mutex::new(QuotaState::default()),
                freed: Condvar::new(),
            }),
        }
    }

    /// The quota's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The whole budget.
    pub fn capacity_bytes(&self) -> u64 {
        self.inner.capacity
    }

    /// Bytes free now (a snapshot: other threads may change it at once).
    pub fn available(&self) -> u64 {
        self.inner.capacity - sync::lock(&self.inner.state).used
    }

    /// Bytes held by live allocations now.
    pub fn used_bytes(&self) -> u64 {
        sync::lock(&self.inner.state).used
    }

    /// The most bytes ever held at once: lets tests and reports check that
    /// the quota was honoured and how much of it was needed.
    pub fn peak_bytes(&self) -> u64 {
        sync::lock(&self.inner.state).peak
    }

    /// `bytes` if they are free now, else `None`; for threads outside a phase
    /// (which have no [`Worker`](crate::Worker) to wait with). Fails like
    /// [`Worker::allocate`](crate::Worker::allocate) if `bytes` exceeds the
    /// whole quota.
    pub fn try_allocate(&self, bytes: u64) -> Result<Option<Allocation>> {
        self.check_fits(bytes)?;
        let mut state = sync::lock(&self.inner.state);
        Ok(self.grant(&mut state, bytes))
    }

    pub(crate) fn generation(&self) -> u64 {
        sync::lock(&self.inner.state).generation
    }

    fn check_fits(&self, bytes: u64) -> Result<()> {
        ensure!(
            bytes <= self.inner.capacity,
            ResourcesExhausted,
            "{bytes} bytes requested from memory quota '{}' of only {} bytes",
            self.inner.name,
            self.inner.capacity
        );
        Ok(())
    }

    fn grant(&self, state: &mut QuotaState, bytes: u64) -> Option<Allocation> {
        if self.inner.capacity - state.used < bytes {
            return None;
        }
        state.used += bytes;
        state.peak = state.peak.max(state.used);
        state.generation += 1;
        Some(Allocation {
            quota: self.clone(),
            bytes,
        })
    }

    fn release(&self, bytes: u64) {
        if bytes == 0 {
            return;
        }
        let mut state = sync::lock(&self.inner.state);
        debug_assert!(
            state.used >= bytes,
            "quota '{}' released more than it granted",
            self.inner.name
        );
        state.used -= bytes;
        state.generation += 1;
        drop(state);
        self.inner.freed.notify_all();
    }

    /// The blocking allocation behind [`Worker::allocate`](crate::Worker::allocate).
    pub(crate) fn allocate_waiting(&self, bytes: u64, cx: &mut WorkerContext) -> Result<Allocation> {
        self.check_fits(bytes)?;
        if let Some(allocation) = self.grant(&mut sync::lock(&self.inner.state), bytes) {
            return Ok(allocation);
        }
        let started = cx.begin_wait(Wait::Resource {
            blocked: Blocked::Memory,
            resource: Arc::new(QuotaWait {
                quota: self.clone(),
                requested: bytes,
            }),
        });
        let mut state = sync::lock(&self.inner.state);
        let outcome = loop {
            if let Some(allocation) = self.grant(&mut state, bytes) {
                break Ok(allocation);
            }
            if cx.cancelled() {
                break Err(());
            }
            state = sync::wait_timeout(&self.inner.freed, state, CANCEL_POLL).0;
        };
        drop(state);
        cx.end_wait(started);
        outcome.map_err(|()| cx.phase.cancellation_error())
    }
}

/// A worker's wait for `requested` bytes of `quota`.
#[derive(Debug)]
struct QuotaWait {
    quota: MemoryQuota,
    requested: u64,
}

impl Resource for QuotaWait {
    fn state(&self) -> u64 {
        self.quota.generation()
    }

    fn code(&self) -> u64 {
        self.requested.wrapping_shl(3) | 2
    }

    fn describe(&self) -> String {
        format!(
            "waits for {} bytes of memory quota '{}' ({} of {} bytes free)",
            self.requested,
            self.quota.name(),
            self.quota.available(),
            self.quota.capacity_bytes()
        )
    }
}

/// Bytes granted by a [`MemoryQuota`]; they go back (and waiters wake) when
/// this drops, so memory cannot leak past the unit that used it.
pub struct Allocation {
    quota: MemoryQuota,
    bytes: u64,
}

impl fmt::Debug for Allocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Allocation")
            .field("quota", &self.quota.inner.name)
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl Allocation {
    /// The bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The name of the quota the bytes belong to.
    pub fn quota_name(&self) -> &str {
        &self.quota.inner.name
    }

    /// Gives back everything above `bytes` now (a reader that allocated for
    /// the largest possible buffer and filled less). No effect if the
    /// allocation is already that small.
    pub fn shrink_to(&mut self, bytes: u64) {
        if bytes < self.bytes {
            let excess = self.bytes - bytes;
            self.bytes = bytes;
            self.quota.release(excess);
        }
    }

    /// Splits off `bytes` (at most all of them) into a separate allocation
    /// of the same quota, so that parts of one grant can travel with
    /// different units and be freed separately.
    pub fn split_off(&mut self, bytes: u64) -> Allocation {
        let bytes = bytes.min(self.bytes);
        self.bytes -= bytes;
        Allocation {
            quota: self.quota.clone(),
            bytes,
        }
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        self.quota.release(self.bytes);
    }
}

/// A fixed set of preallocated buffers shared by producer and consumer
/// stages (Themis's Pool policy; TritonSort's LDBuffer and WriterBuffer
/// pools): the memory is allocated once, a stage waits when all buffers are
/// in use, and a buffer returns, cleared, when it drops.
///
/// # Thread safety
/// Cheap to clone (an `Arc`); the free buffers sit in a bounded channel that
/// holds at most `buffers` of them.
#[derive(Clone)]
pub struct BufferPool {
    inner: Arc<PoolInner>,
}

struct PoolInner {
    name: String,
    buffers: usize,
    buffer_bytes: usize,
    free_sender: Sender<Vec<u8>>,
    free_receiver: Receiver<Vec<u8>>,
    /// Buffers handed out so far (for reports and tests).
    taken: AtomicU64,
}

impl fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferPool")
            .field("name", &self.inner.name)
            .field("buffers", &self.inner.buffers)
            .field("buffer_bytes", &self.inner.buffer_bytes)
            .field("available", &self.available())
            .finish()
    }
}

impl BufferPool {
    /// A pool of `buffers` buffers of `buffer_bytes` capacity each, all
    /// allocated now. A pool of zero buffers is allowed but every `take`
    /// fails, since it could never be served.
    pub fn new(name: &str, buffers: usize, buffer_bytes: usize) -> Self {
        let (free_sender, free_receiver) = crossbeam_channel::bounded(buffers);
        for _ in 0..buffers {
            free_sender
                .try_send(Vec::with_capacity(buffer_bytes))
                .expect("a pool's channel holds all of its buffers");
        }
        Self {
            inner: Arc::new(PoolInner {
                name: name.to_string(),
                buffers,
                buffer_bytes,
                free_sender,
                free_receiver,
                taken: AtomicU64::new(0),
            }),
        }
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// How many buffers the pool owns.
    pub fn buffers(&self) -> usize {
        self.inner.buffers
    }

    /// The capacity of each buffer.
    pub fn buffer_bytes(&self) -> usize {
        self.inner.buffer_bytes
    }

    /// Buffers free now (a snapshot).
    pub fn available(&self) -> usize {
        self.inner.free_receiver.len()
    }

    /// How many times a buffer was handed out.
    pub fn taken_count(&self) -> u64 {
        self.inner.taken.load(Ordering::Relaxed)
    }

    /// A free buffer now, or `None`; for threads outside a phase.
    pub fn try_take(&self) -> Option<PooledBuffer> {
        self.inner
            .free_receiver
            .try_recv()
            .ok()
            .map(|buffer| self.wrap(buffer))
    }

    fn wrap(&self, buffer: Vec<u8>) -> PooledBuffer {
        self.inner.taken.fetch_add(1, Ordering::Relaxed);
        PooledBuffer {
            buffer,
            pool: Arc::clone(&self.inner),
        }
    }

    /// The blocking take behind [`Worker::take`](crate::Worker::take).
    pub(crate) fn take_waiting(&self, cx: &mut WorkerContext) -> Result<PooledBuffer> {
        ensure!(
            self.inner.buffers > 0,
            ResourcesExhausted,
            "buffer pool '{}' has no buffers",
            self.inner.name
        );
        match self.inner.free_receiver.try_recv() {
            Ok(buffer) => return Ok(self.wrap(buffer)),
            Err(TryRecvError::Empty) => {}
            Err(TryRecvError::Disconnected) => unreachable!("the pool holds both ends of its channel"),
        }
        let started = cx.begin_wait(Wait::Resource {
            blocked: Blocked::Memory,
            resource: Arc::new(self.clone()),
        });
        let outcome = crossbeam_channel::select! {
            recv(self.inner.free_receiver) -> buffer => buffer.ok(),
            recv(cx.cancel) -> _ => None,
        };
        cx.end_wait(started);
        match outcome {
            Some(buffer) => Ok(self.wrap(buffer)),
            None => Err(cx.phase.cancellation_error()),
        }
    }
}

/// A worker's wait for a buffer of the pool.
impl Resource for BufferPool {
    fn state(&self) -> u64 {
        self.available() as u64
    }

    fn code(&self) -> u64 {
        3
    }

    fn describe(&self) -> String {
        format!(
            "waits for a buffer from pool '{}' ({} of {} buffers free)",
            self.name(),
            self.available(),
            self.buffers()
        )
    }
}

/// A buffer on loan from a [`BufferPool`]: use it as a `Vec<u8>` (it starts
/// empty with the pool's capacity); it goes back to the pool, cleared, when
/// it drops.
pub struct PooledBuffer {
    buffer: Vec<u8>,
    pool: Arc<PoolInner>,
}

impl fmt::Debug for PooledBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PooledBuffer")
            .field("pool", &self.pool.name)
            .field("len", &self.buffer.len())
            .field("capacity", &self.buffer.capacity())
            .finish()
    }
}

impl Deref for PooledBuffer {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        &self.buffer
    }
}

impl DerefMut for PooledBuffer {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
        &mut self.buffer
    }
}

impl WorkUnit for PooledBuffer {
    fn bytes(&self) -> u64 {
        self.buffer.len() as u64
    }
}

/// A unit that carries the memory it was charged to: the allocation travels
/// with the data and goes back to its quota when the consumer drops the pair.
/// This is how a Themis-style Quota between a producer and a consumer stage
/// is expressed (the producer allocates, the consumer frees).
impl<T: WorkUnit> WorkUnit for (T, Allocation) {
    fn bytes(&self) -> u64 {
        self.0.bytes()
    }
}

impl Drop for PooledBuffer {
    fn drop(&mut self) {
        let mut buffer = std::mem::take(&mut self.buffer);
        buffer.clear();
        // Keep the pool's memory what it said it would be, even if the user
        // grew the buffer or swapped it for another Vec.
        let capacity = self.pool.buffer_bytes;
        if buffer.capacity() > capacity {
            buffer.shrink_to(capacity);
        } else if buffer.capacity() < capacity {
            buffer.reserve_exact(capacity);
        }
        // Never full: the channel holds `buffers` and this one was out of it.
        let _ = self.pool.free_sender.try_send(buffer);
    }
}
