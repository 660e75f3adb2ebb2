//! The one way a persistent write is made: [`Persist`]. Every structure on
//! a region stores, flushes and fences through it, and is generic over it,
//! so the production modes compile to the bare instructions while the
//! tracing mode records every event for the crash tester.
//!
//! Modes: [`Hardware`] (a cache-line write-back chosen by CPUID, `clwb`,
//! else `clflushopt`, else `clflush`, then `sfence`), [`FenceOnly`] (a
//! platform whose caches are persistent, eADR: stores need no flush, only
//! ordering), [`Volatile`] (no persistence at all: the baseline),
//! [`Latency`] (another mode plus a wait per line flushed: slower media),
//! and [`Tracing`] (records stores, flushes and fences, flushes nothing).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::epoch::{stripe, STRIPES};
use crate::region::{Region, HEADER, ROOT_AT};

pub use crate::region::LINE;

/// The cache line holding byte `at`.
#[inline]
pub fn line_of(at: u64) -> u64 {
    at / LINE
}

/// How stores to a region reach its media.
///
/// `store` is an aligned 8-byte store (failure-atomic); `copy` a run of
/// bytes (failure-atomic only per aligned 8 bytes, and only to memory no
/// reader can reach yet); `flush` writes back every line of a range;
/// `fence` orders: a store is durable once its line was flushed and a
/// fence followed. Offsets are the region's, never pointers.
pub trait Persist: Send + Sync {
    /// Stores `value` at `at` (8-byte aligned) with release ordering, so
    /// that a lock-free reader who sees it sees what was stored before.
    fn store(&self, region: &Region, at: u64, value: u64) {
        region.word(at).store(value, Ordering::Release);
    }

    /// Copies `bytes` to `at`.
    fn copy(&self, region: &Region, at: u64, bytes: &[u8]) {
        region.write_bytes(at, bytes);
    }

    /// Writes back the cache lines of `at..at + len`.
    fn flush(&self, region: &Region, at: u64, len: u64);

    /// Orders every earlier flush before every later store.
    fn fence(&self);

    /// Writes whole lines, each `(offset, bytes)` at `at + offset` (a line
    /// boundary), and flushes them: [`copy`](Self::copy) then
    /// [`flush`](Self::flush) of each, for lines no reader reaches yet (a
    /// new segment's). [`Hardware`] streams them to memory instead
    /// (non-temporal stores: a line written whole need not first be read
    /// into the cache) and counts them once: a count is a locked add, which
    /// waits for every flush and streamed store before it, so a count per
    /// line would let only one line travel at a time.
    fn write_lines(&self, region: &Region, at: u64, lines: &[(u64, [u8; LINE as usize])]) {
        for (offset, line) in lines {
            self.copy(region, at + offset, line);
            self.flush(region, at + offset, LINE);
        }
    }

    /// The flushes and fences this mode has made.
    fn counts(&self) -> &Counts;

    /// The mode's name, as users spell it (`clwb`, `fence`, `none`, ...).
    fn name(&self) -> String;

    /// Stores `value` at `at`, then flushes its line and fences: the
    /// common "persist one word" step.
    fn persist_word(&self, region: &Region, at: u64, value: u64) {
        self.store(region, at, value);
        self.flush(region, at, 8);
        self.fence();
    }

    /// Publishes `root` as the region's root object, failure-atomically
    /// (one 8-byte store, flushed and fenced).
    fn set_root(&self, region: &Region, root: u64) {
        assert!(
            root == 0 || (root >= HEADER && root < region.len() && root.is_multiple_of(8)),
            "root offset {root} outside the region of {} bytes or unaligned",
            region.len()
        );
        self.persist_word(region, ROOT_AT, root);
    }
}

/// Flushes (cache lines written back) and fences made, for the statistics
/// every mode keeps: these, not the machine, are the figure to compare.
/// Counted per stripe of threads, each on its own cache line, so that two
/// threads' writes do not pass one line back and forth.
#[derive(Debug, Default)]
pub struct Counts {
    stripes: [Tally; STRIPES],
}

/// One stripe's (flushes, fences).
#[derive(Debug, Default)]
#[repr(align(64))]
struct Tally(AtomicU64, AtomicU64);

impl Counts {
    fn mine(&self) -> &Tally {
        &self.stripes[stripe()]
    }

    /// Counts a flush of `at..at + len`; returns the lines it covers.
    fn add_flush(&self, at: u64, len: u64) -> std::ops::Range<u64> {
        let span = lines(at, len);
        self.add_flushes(span.end - span.start);
        span
    }

    fn add_flushes(&self, lines: u64) {
        self.mine().0.fetch_add(lines, Ordering::Relaxed);
    }

    fn add_fence(&self) {
        self.mine().1.fetch_add(1, Ordering::Relaxed);
    }

    /// Cache lines flushed so far.
    pub fn flushes(&self) -> u64 {
        self.stripes
            .iter()
            .map(|tally| tally.0.load(Ordering::Relaxed))
            .sum()
    }

    /// Cache lines flushed so far by this thread's stripe: this thread's
    /// own while no other shares it (threads are dealt the stripes in
    /// turn, so up to 8 threads each have their own).
    pub fn own_flushes(&self) -> u64 {
        self.mine().0.load(Ordering::Relaxed)
    }

    /// Fences so far.
    pub fn fences(&self) -> u64 {
        self.stripes
            .iter()
            .map(|tally| tally.1.load(Ordering::Relaxed))
            .sum()
    }
}

/// The lines `at..at + len` covers (none when `len` is 0).
fn lines(at: u64, len: u64) -> std::ops::Range<u64> {
    if len == 0 {
        return 0..0;
    }
    line_of(at)..line_of(at + len - 1) + 1
}

/// The cache-line write-back instructions, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushKind {
    /// Writes the line back and may keep it cached.
    Clwb,
    /// Writes the line back and evicts it, unordered with other flushes.
    ClflushOpt,
    /// Writes the line back and evicts it, ordered (the oldest, slowest).
    Clflush,
}

impl FlushKind {
    /// The best this CPU has (CPUID leaf 7: bit 24 of EBX is `clwb`, bit 23
    /// `clflushopt`; `clflush` is in every x86-64).
    pub fn detect() -> FlushKind {
        detect_flush()
    }

    /// Its name, as the mode is spelt.
    pub fn name(self) -> &'static str {
        match self {
            FlushKind::Clwb => "clwb",
            FlushKind::ClflushOpt => "clflushopt",
            FlushKind::Clflush => "clflush",
        }
    }
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
fn detect_flush() -> FlushKind {
    let max_leaf = std::arch::x86_64::__cpuid(0).eax;
    let ebx = if max_leaf >= 7 {
        std::arch::x86_64::__cpuid_count(7, 0).ebx
    } else {
        0
    };
    if ebx & (1 << 24) != 0 {
        FlushKind::Clwb
    } else if ebx & (1 << 23) != 0 {
        FlushKind::ClflushOpt
    } else {
        FlushKind::Clflush
    }
}

#[cfg(not(all(target_arch = "x86_64", not(miri))))]
fn detect_flush() -> FlushKind {
    FlushKind::Clflush
}

/// Writes back the line holding `address` with `kind`'s instruction.
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[inline]
#[allow(unsafe_code)]
fn write_back(kind: FlushKind, address: *const u8) {
    // SAFETY: the instructions only write back (and maybe evict) the line
    // holding `address`, a byte of a live mapping (the caller's region);
    // they change no memory and no register, and `kind` was chosen by
    // CPUID, so the instruction exists on this CPU.
    unsafe {
        match kind {
            FlushKind::Clwb => {
                std::arch::asm!("clwb [{0}]", in(reg) address, options(nostack, preserves_flags))
            }
            FlushKind::ClflushOpt => {
                std::arch::asm!("clflushopt [{0}]", in(reg) address, options(nostack, preserves_flags))
            }
            FlushKind::Clflush => std::arch::x86_64::_mm_clflush(address),
        }
    }
}

#[cfg(not(all(target_arch = "x86_64", not(miri))))]
#[inline]
fn write_back(_kind: FlushKind, _address: *const u8) {}

/// A store fence: earlier flushes complete before later stores.
#[inline]
fn sfence() {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `sfence` only orders stores; it reads and writes nothing.
    #[allow(unsafe_code)]
    unsafe {
        std::arch::x86_64::_mm_sfence()
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    std::sync::atomic::fence(Ordering::SeqCst);
}

/// Persistent memory behind CPU caches: each line flushed by the best
/// write-back instruction this CPU has, then an `sfence`.
#[derive(Debug)]
pub struct Hardware {
    kind: FlushKind,
    counts: Counts,
}

impl Hardware {
    /// The best instruction this CPU has.
    pub fn detect() -> Hardware {
        Hardware::with(FlushKind::detect())
    }

    /// A given instruction (the caller knows the CPU has it: see
    /// [`FlushKind::detect`]; `clflush` is always there).
    pub fn with(kind: FlushKind) -> Hardware {
        Hardware {
            kind,
            counts: Counts::default(),
        }
    }

    /// The instruction used.
    pub fn kind(&self) -> FlushKind {
        self.kind
    }
}

impl Persist for Hardware {
    fn write_lines(&self, region: &Region, at: u64, lines: &[(u64, [u8; LINE as usize])]) {
        for (offset, line) in lines {
            region.stream_line(at + offset, line);
        }
        self.counts.add_flushes(lines.len() as u64);
    }

    fn flush(&self, region: &Region, at: u64, len: u64) {
        for line in self.counts.add_flush(at, len) {
            write_back(self.kind, region.address(line * LINE));
        }
    }

    fn fence(&self) {
        self.counts.add_fence();
        sfence();
    }

    fn counts(&self) -> &Counts {
        &self.counts
    }

    fn name(&self) -> String {
        self.kind.name().to_string()
    }
}

/// Caches that are themselves persistent (eADR): a store is durable once
/// it is visible, so flushes cost nothing; fences still order.
#[derive(Debug, Default)]
pub struct FenceOnly {
    counts: Counts,
}

impl Persist for FenceOnly {
    fn flush(&self, _region: &Region, at: u64, len: u64) {
        self.counts.add_flush(at, len);
    }

    fn fence(&self) {
        self.counts.add_fence();
        sfence();
    }

    fn counts(&self) -> &Counts {
        &self.counts
    }

    fn name(&self) -> String {
        "fence".to_string()
    }
}

/// No persistence: flushes and fences are counted and nothing else (the
/// baseline a volatile table would be).
#[derive(Debug, Default)]
pub struct Volatile {
    counts: Counts,
}

impl Persist for Volatile {
    fn flush(&self, _region: &Region, at: u64, len: u64) {
        self.counts.add_flush(at, len);
    }

    fn fence(&self) {
        self.counts.add_fence();
    }

    fn counts(&self) -> &Counts {
        &self.counts
    }

    fn name(&self) -> String {
        "none".to_string()
    }
}

/// Another mode plus a busy wait of `per_line` after every line flushed:
/// media slower than DRAM behind the same caches (the seed emulated them
/// the same way).
#[derive(Debug)]
pub struct Latency<P> {
    inner: P,
    per_line: Duration,
}

impl<P: Persist> Latency<P> {
    /// `inner` with `per_line` added to every line flushed.
    pub fn new(inner: P, per_line: Duration) -> Latency<P> {
        Latency { inner, per_line }
    }
}

impl<P: Persist> Persist for Latency<P> {
    fn flush(&self, region: &Region, at: u64, len: u64) {
        self.inner.flush(region, at, len);
        let span = lines(at, len);
        let until = Instant::now() + self.per_line * (span.end - span.start) as u32;
        while Instant::now() < until {
            std::hint::spin_loop();
        }
    }

    fn fence(&self) {
        self.inner.fence();
    }

    fn counts(&self) -> &Counts {
        self.inner.counts()
    }

    fn name(&self) -> String {
        format!("latency:{}ns", self.per_line.as_nanos())
    }
}

/// One recorded event of a [`Tracing`] mode, in program order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Bytes stored at an offset (an 8-byte store is 8 bytes).
    Store { at: u64, bytes: Vec<u8> },
    /// A cache line written back (by its number: offset / 64).
    Flush { line: u64 },
    /// A fence.
    Fence,
    /// An operation of a structure began (its kind, for the statistics
    /// and the crash tester's oracle).
    Begin { operation: &'static str },
    /// The operation ended (completed: it must survive any later crash).
    End,
}

/// Records every store, flush and fence (and the structure's operation
/// boundaries) for the crash tester, and flushes nothing: what reached the
/// media is decided later, from the trace, by the x86 persistency model.
#[derive(Debug, Default)]
pub struct Tracing {
    events: Mutex<Vec<Event>>,
    counts: Counts,
}

impl Tracing {
    fn record(&self, event: Event) {
        self.events
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(event);
    }

    /// Marks the start of an operation of kind `operation`.
    pub fn begin(&self, operation: &'static str) {
        self.record(Event::Begin { operation });
    }

    /// Marks the end of the operation begun last.
    pub fn end(&self) {
        self.record(Event::End);
    }

    /// The events so far, leaving none recorded.
    pub fn take(&self) -> Vec<Event> {
        std::mem::take(
            &mut *self
                .events
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        )
    }
}

impl Persist for Tracing {
    fn store(&self, region: &Region, at: u64, value: u64) {
        region.word(at).store(value, Ordering::Release);
        self.record(Event::Store {
            at,
            bytes: value.to_le_bytes().to_vec(),
        });
    }

    fn copy(&self, region: &Region, at: u64, bytes: &[u8]) {
        region.write_bytes(at, bytes);
        self.record(Event::Store {
            at,
            bytes: bytes.to_vec(),
        });
    }

    fn flush(&self, _region: &Region, at: u64, len: u64) {
        for line in self.counts.add_flush(at, len) {
            self.record(Event::Flush { line });
        }
    }

    fn fence(&self) {
        self.counts.add_fence();
        self.record(Event::Fence);
    }

    fn counts(&self) -> &Counts {
        &self.counts
    }

    fn name(&self) -> String {
        "trace".to_string()
    }
}
