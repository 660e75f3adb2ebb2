//! Running a phase: one thread per worker, a monitor thread, the first
//! error wins and cancels the rest.
//!
//! # Algorithm (`Phase::run_with_report`)
//! 1. Make the cancellation channel and, per queue, its live writer and
//!    reader counts (the workers of the stages that declared it).
//! 2. Give every worker channel ends for its stage's queues, then drop the
//!    phase's own ends: from here on the workers hold the only `Sender`s,
//!    so a queue closes exactly when its last writer worker returns.
//! 3. Start the monitor (deadlock probes, progress callbacks), then the
//!    workers.
//! 4. Each worker runs its body under `catch_unwind`. On an error or a
//!    panic it records the failure (first one wins), which cancels the
//!    phase, *before* its channel ends drop, so no reader can mistake a
//!    failed writer for the end of its input.
//! 5. Join every worker, stop and join the monitor, build the report.
//!
//! ```text
//!   run() ──spawn──> monitor ─────probe every 50 ms──────────────┐
//!     │                                                          │ fail(deadlock)
//!     ├─spawn──> worker 0 ─ body ─ Err ─> fail(e) ─> cancel ─────┤
//!     ├─spawn──> worker 1 ─ recv blocked ... woken: Err(copy of e)
//!     └─join all, then the monitor; return the first error
//! ```

use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::RecvTimeoutError;
use spillway_core::sync;
use spillway_core::{Error, Interrupt, Result};

use crate::context::{PhaseShared, WorkerContext, WorkerSlot};
use crate::graph::{describe, Graph, PhaseBuilder, QueueRef, StageBody};
use crate::queue::{ErasedEnd, QueueInfo};
use crate::report::{collect, PhaseReport, StageLayout};
use crate::wait::Wait;
use crate::worker::{QueueEnds, Worker};

/// How long every running worker must stay blocked, with nothing changing
/// hands, before the phase is declared deadlocked.
pub const DEADLOCK_TIMEOUT_DEFAULT: Duration = Duration::from_secs(2);

/// The longest interval between two deadlock probes.
const PROBE_INTERVAL_MAX: Duration = Duration::from_millis(50);

/// A callback for progress bars, called by the monitor thread.
pub(crate) struct Progress {
    every: Duration,
    callback: Box<dyn FnMut(&PhaseReport) + Send>,
}

/// A checked, runnable phase: a graph of stages joined by bounded queues.
/// Build it with [`PhaseBuilder`](crate::PhaseBuilder), print it with
/// [`describe`](Self::describe), run it once with [`run`](Self::run).
pub struct Phase {
    graph: Graph,
    deadlock_timeout: Option<Duration>,
    progress: Option<Progress>,
    interrupt: Option<Interrupt>,
}

impl PhaseBuilder {
    /// Checks the graph and returns a runnable phase.
    ///
    /// Fails with `InvalidArgument` listing every problem found: no stages;
    /// empty or duplicate stage or queue names; a stage with 0 workers; a queue of
    /// capacity 0; a stage naming a queue of another phase; a queue that no
    /// stage writes or no stage reads; a cycle (a stage that reads, directly
    /// or through other stages, a queue it writes could never see that
    /// queue close).
    pub fn build(self) -> Result<Phase> {
        Ok(Phase {
            graph: self.check()?,
            deadlock_timeout: Some(DEADLOCK_TIMEOUT_DEFAULT),
            progress: None,
            interrupt: None,
        })
    }
}

impl fmt::Debug for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Phase")
            .field("name", &self.graph.name)
            .field(
                "stages",
                &self
                    .graph
                    .order
                    .iter()
                    .map(|&stage| &self.graph.stages[stage].spec)
                    .collect::<Vec<_>>(),
            )
            .field("deadlock_timeout", &self.deadlock_timeout)
            .finish_non_exhaustive()
    }
}

impl Phase {
    /// The phase's name.
    pub fn name(&self) -> &str {
        &self.graph.name
    }

    /// The graph as text: stages with worker counts and the queues they read
    /// and write (with capacities) in topological order, then each queue
    /// with its writer and reader stages.
    ///
    /// ```text
    /// phase 'demo': 2 stage(s), 1 queue(s)
    ///   stage 'source' x2 writes 'numbers'(4)
    ///   stage 'sink' x1 reads 'numbers'(4)
    ///   queue 'numbers' capacity 4: 'source' -> 'sink'
    /// ```
    pub fn describe(&self) -> String {
        describe(&self.graph)
    }

    /// Sets how long every running worker must stay blocked, with no unit
    /// moving and no memory, buffer or token changing hands, before the
    /// phase fails as deadlocked (default [`DEADLOCK_TIMEOUT_DEFAULT`]).
    /// Make it longer than any wait on a resource held *outside* the phase.
    pub fn set_deadlock_timeout(&mut self, window: Duration) -> &mut Self {
        self.deadlock_timeout = Some(window);
        self
    }

    /// Turns the deadlock detector off (the phase may then hang forever).
    pub fn disable_deadlock_detection(&mut self) -> &mut Self {
        self.deadlock_timeout = None;
        self
    }

    /// Calls `callback` about every `every` while the phase runs, with a
    /// report of the counters so far (running workers are charged their wall
    /// time so far), from the monitor thread: for progress bars. The
    /// callback should be quick; a panic in it fails the phase.
    pub fn set_progress<F>(&mut self, every: Duration, callback: F) -> &mut Self
    where
        F: FnMut(&PhaseReport) + Send + 'static,
    {
        self.progress = Some(Progress {
            every: every.max(Duration::from_millis(1)),
            callback: Box::new(callback),
        });
        self
    }

    /// Stops the phase with [`Error::Interrupted`] once `interrupt` is
    /// raised: the monitor looks at it every few tens of milliseconds and
    /// tears the phase down as it does after a worker's error (blocked
    /// workers wake at once; a long computation between `recv`/`send`
    /// calls should poll [`Worker::is_cancelled`](crate::Worker::is_cancelled)).
    /// A phase that ends with the interrupt raised fails with it even if
    /// its workers finished first, so an interrupted caller never takes
    /// the phase's work for done.
    pub fn set_interrupt(&mut self, interrupt: Interrupt) -> &mut Self {
        self.interrupt = Some(interrupt);
        self
    }

    /// Runs every worker on its own thread, joins them all and returns the
    /// report, or the phase's first error (a worker's error prefixed with
    /// its stage and index, a panic as `Internal`, or the deadlock detector's
    /// `ResourcesExhausted`). No thread outlives the call.
    pub fn run(self) -> Result<PhaseReport> {
        let (report, result) = self.run_with_report();
        result.map(|()| report)
    }

    /// Like [`run`](Self::run), but returns the report also when the phase
    /// failed, to see how far it got.
    pub fn run_with_report(self) -> (PhaseReport, Result<()>) {
        let started = Instant::now();
        let (cancel_sender, cancel_receiver) = crossbeam_channel::bounded::<()>(0);
        let shared = Arc::new(PhaseShared::new(self.graph.name.clone(), cancel_sender));

        // 1. Queue bookkeeping.
        let workers_of = |stage: usize| self.graph.stages[stage].spec.workers;
        let queues: Arc<[QueueInfo]> = self
            .graph
            .queues
            .iter()
            .enumerate()
            .map(|(queue, decl)| {
                let writers: Vec<usize> = self.users(queue, true);
                let readers: Vec<usize> = self.users(queue, false);
                QueueInfo {
                    name: Arc::clone(&decl.name),
                    capacity: decl.capacity,
                    writer_stages: writers
                        .iter()
                        .map(|&stage| self.graph.stages[stage].spec.name.clone())
                        .collect(),
                    live_writers: AtomicUsize::new(writers.iter().map(|&stage| workers_of(stage)).sum()),
                    live_readers: AtomicUsize::new(readers.iter().map(|&stage| workers_of(stage)).sum()),
                    depth_max: AtomicUsize::new(0),
                }
            })
            .collect();

        // 2. Workers with their channel ends.
        let mut layouts = Vec::with_capacity(self.graph.order.len());
        let mut slots = Vec::new();
        let mut launches: Vec<(Worker, StageBody)> = Vec::new();
        for &stage in &self.graph.order {
            let decl = &self.graph.stages[stage];
            let spec = &decl.spec;
            let stage_name: Arc<str> = Arc::from(spec.name.as_str());
            let first_slot = slots.len();
            for index in 0..spec.workers {
                let ends_for = |used: &[QueueRef], sender: bool| {
                    let mut ends: Vec<Option<Box<dyn ErasedEnd>>> =
                        (0..self.graph.queues.len()).map(|_| None).collect();
                    for queue in used {
                        let channel = &self.graph.queues[queue.queue].channel;
                        ends[queue.queue] = Some(if sender {
                            channel.sender()
                        } else {
                            channel.receiver()
                        });
                    }
                    ends
                };
                let ends = QueueEnds {
                    phase_id: self.graph.id,
                    senders: ends_for(&spec.writes, true),
                    receivers: ends_for(&spec.reads, false),
                };
                let slot = Arc::new(WorkerSlot::new(index));
                slots.push(Arc::clone(&slot));
                let worker = Worker::new(
                    ends,
                    WorkerContext::new(
                        Arc::clone(&shared),
                        slot,
                        cancel_receiver.clone(),
                        Arc::clone(&stage_name),
                        spec.workers,
                        self.graph.queues.len(),
                    ),
                );
                launches.push((worker, Arc::clone(&decl.body)));
            }
            layouts.push(StageLayout {
                name: spec.name.clone(),
                workers: spec.workers,
                source: spec.reads.is_empty(),
                slots: first_slot..slots.len(),
            });
        }
        let Phase {
            graph:
                Graph {
                    name,
                    queues: queue_decls,
                    queue_order,
                    ..
                },
            deadlock_timeout,
            progress,
            interrupt,
        } = self;
        drop(queue_decls);
        drop(cancel_receiver);

        // 3. The monitor, then the workers.
        let (done_sender, done_receiver) = crossbeam_channel::bounded::<()>(0);
        // Looked at once more when the phase is over: one that ends between
        // two of the monitor's looks is interrupted all the same.
        let interrupt_at_end = interrupt.clone();
        let monitor = Monitor {
            shared: Arc::clone(&shared),
            slots: slots.clone(),
            queues: Arc::clone(&queues),
            layouts: layouts.clone(),
            queue_order: queue_order.clone(),
            deadlock_timeout,
            progress,
            interrupt,
            started,
            stuck: None,
        };
        let monitor = thread::Builder::new()
            .name(thread_name(&format!("{name}:monitor")))
            .spawn(move || monitor.run(&done_receiver));
        let monitor = match monitor {
            Ok(handle) => Some(handle),
            Err(error) => {
                shared.fail(Error::io(
                    format!("phase '{name}': starting the monitor thread"),
                    error,
                ));
                launches.clear();
                None
            }
        };
        let mut handles = Vec::with_capacity(launches.len());
        let mut launches = launches.into_iter();
        for (worker, body) in launches.by_ref() {
            let label = format!("{}:{}", worker.stage(), worker.index());
            let context = format!("phase '{name}': starting a thread for stage '{label}'");
            let worker_shared = Arc::clone(&shared);
            let worker_queues = Arc::clone(&queues);
            let spawned = thread::Builder::new()
                .name(thread_name(&label))
                .spawn(move || run_worker(worker, &body, &worker_shared, &worker_queues));
            match spawned {
                Ok(handle) => handles.push(handle),
                Err(error) => {
                    shared.fail(Error::io(context, error));
                    break;
                }
            }
        }
        // Workers never started (after a failed spawn) drop their ends here.
        drop(launches);

        // 5. Join everything.
        for handle in handles {
            if handle.join().is_err() {
                shared.fail(Error::Internal(format!(
                    "phase '{name}': a worker thread panicked outside its body"
                )));
            }
        }
        drop(done_sender);
        if let Some(handle) = monitor {
            if handle.join().is_err() {
                shared.fail(Error::Internal(format!(
                    "phase '{name}': the monitor thread panicked"
                )));
            }
        }
        let report = collect(&name, started.elapsed(), &layouts, &slots, &queues, &queue_order);
        match shared.take_error() {
            Some(error) => (report, Err(error)),
            None => match interrupt_at_end.map(|interrupt| interrupt.check()) {
                Some(Err(error)) => (report, Err(error)),
                _ => (report, Ok(())),
            },
        }
    }

    /// Stages that write (`writers`) or read `queue`, in topological order.
    fn users(&self, queue: usize, writers: bool) -> Vec<usize> {
        self.graph
            .order
            .iter()
            .copied()
            .filter(|&stage| {
                let spec = &self.graph.stages[stage].spec;
                let used = if writers { &spec.writes } else { &spec.reads };
                used.iter().any(|used| used.queue == queue)
            })
            .collect()
    }
}

/// A thread name the OS accepts (no NUL bytes), for debuggers and `top -H`.
fn thread_name(name: &str) -> String {
    name.replace('\0', "?")
}

/// The body of one worker thread.
fn run_worker(mut worker: Worker, body: &StageBody, shared: &PhaseShared, queues: &[QueueInfo]) {
    let started = Instant::now();
    let outcome = panic::catch_unwind(AssertUnwindSafe(|| body(&mut worker)));
    let wall = started.elapsed();
    let context = format!("stage '{}' worker {}", worker.stage(), worker.index());
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(error)) => shared.fail(error.context(&context)),
        Err(payload) => shared.fail(Error::Internal(format!(
            "{context} panicked: {}",
            panic_message(payload.as_ref())
        ))),
    }
    // After the failure is published: only now may the queues close.
    worker.retire(wall, queues);
}

/// The monitor thread of a running phase: deadlock probes and progress.
struct Monitor {
    shared: Arc<PhaseShared>,
    slots: Vec<Arc<WorkerSlot>>,
    queues: Arc<[QueueInfo]>,
    layouts: Vec<StageLayout>,
    queue_order: Vec<usize>,
    deadlock_timeout: Option<Duration>,
    progress: Option<Progress>,
    interrupt: Option<Interrupt>,
    started: Instant,
    /// Since when every running worker has been blocked with this signature.
    stuck: Option<(Instant, Vec<u64>)>,
}

impl Monitor {
    fn run(mut self, done: &crossbeam_channel::Receiver<()>) {
        let mut interval = PROBE_INTERVAL_MAX;
        if let Some(window) = self.deadlock_timeout {
            interval = interval.min(window / 4);
        }
        if let Some(progress) = &self.progress {
            interval = interval.min(progress.every);
        }
        let interval = interval.max(Duration::from_millis(1));
        let mut next_progress = self
            .progress
            .as_ref()
            .map(|progress| self.started + progress.every);
        loop {
            match done.recv_timeout(interval) {
                Err(RecvTimeoutError::Timeout) => {}
                // Disconnected: every worker has been joined.
                Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
            }
            if let Some(interrupt) = &self.interrupt {
                if let Err(error) = interrupt.check() {
                    if !self.shared.is_cancelled() {
                        self.shared.fail(error);
                    }
                }
            }
            if let Some(window) = self.deadlock_timeout {
                if !self.shared.is_cancelled() {
                    self.probe(window);
                }
            }
            if let Some(due) = next_progress {
                if Instant::now() >= due {
                    self.report_progress();
                    next_progress = self
                        .progress
                        .as_ref()
                        .map(|progress| Instant::now() + progress.every);
                }
            }
        }
    }

    fn report_progress(&mut self) {
        let report = collect(
            self.shared.name(),
            self.started.elapsed(),
            &self.layouts,
            &self.slots,
            &self.queues,
            &self.queue_order,
        );
        let Some(progress) = self.progress.as_mut() else {
            return;
        };
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| (progress.callback)(&report)));
        if let Err(payload) = outcome {
            self.progress = None;
            self.shared.fail(Error::Internal(format!(
                "phase '{}': the progress callback panicked: {}",
                self.shared.name(),
                panic_message(payload.as_ref())
            )));
        }
    }

    /// One deadlock probe.
    ///
    /// The signature of a probe lists, per running worker, its units moved,
    /// its waits ended, and the state of the resource it waits for. If every
    /// running worker is in a wait and the signature has not changed for
    /// `window`, nothing can make progress: fail the phase.
    fn probe(&mut self, window: Duration) {
        let mut signature = Vec::with_capacity(self.slots.len() * 4);
        let mut waits: Vec<Option<Wait>> = Vec::with_capacity(self.slots.len());
        let mut running = 0;
        for slot in &self.slots {
            if slot.finished.load(Ordering::Acquire) {
                signature.push(u64::MAX);
                waits.push(None);
                continue;
            }
            running += 1;
            // Clone the wait out so the slot lock is not held while the
            // resource's own lock is taken (the worker nests them the other
            // way round).
            let wait = sync::lock(&slot.wait).clone();
            let Some(wait) = wait else {
                // Someone is working.
                self.stuck = None;
                return;
            };
            signature.push(
                slot.units_in
                    .load(Ordering::Relaxed)
                    .wrapping_add(slot.units_out.load(Ordering::Relaxed)),
            );
            signature.push(slot.waits_ended.load(Ordering::Relaxed));
            signature.push(wait.resource_state());
            signature.push(wait.code());
            waits.push(Some(wait));
        }
        if running == 0 {
            self.stuck = None;
            return;
        }
        match &self.stuck {
            Some((since, previous)) if *previous == signature => {
                if since.elapsed() >= window {
                    let blocked_for = since.elapsed();
                    self.shared.fail(self.deadlock_error(blocked_for, &waits));
                }
            }
            _ => self.stuck = Some((Instant::now(), signature)),
        }
    }

    fn deadlock_error(&self, blocked_for: Duration, waits: &[Option<Wait>]) -> Error {
        let mut message = format!(
            "deadlock in phase '{}': every running worker has been blocked for {:.1} s with no unit moved \
             and no memory, buffer or disk token changing hands",
            self.shared.name(),
            blocked_for.as_secs_f64()
        );
        for layout in &self.layouts {
            for position in layout.slots.clone() {
                let what = match &waits[position] {
                    Some(wait) => wait.describe(&self.queues),
                    None => "has returned".to_string(),
                };
                let index = self.slots[position].index;
                message.push_str(&format!("\n  stage '{}' worker {index}: {what}", layout.name));
            }
        }
        Error::ResourcesExhausted(message)
    }
}

/// The text of a panic payload (`panic!` with a literal or a formatted message).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_string()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic with a non-string payload".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn panic_messages() {
        assert_eq!(panic_message(&"literal"), "literal");
        assert_eq!(panic_message(&String::from("formatted 3")), "formatted 3");
        assert_eq!(panic_message(&17_u32), "a panic with a non-string payload");
    }
}
