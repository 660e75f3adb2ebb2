//! Declaring a phase: queues, stages, and the checks that make a graph
//! runnable.
//!
//! The graph is data (seed 003: "declared as data and printable"): each
//! stage states which queues it reads and writes, so the runtime can check
//! the graph before any thread starts, print it, close each queue when its
//! last writer returns, and give each worker channel ends for exactly the
//! queues its stage declared.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use spillway_core::{Error, Result};

use crate::queue::{Consumer, ErasedChannel, Producer, TypedChannel};
use crate::unit::WorkUnit;
use crate::worker::Worker;

/// Tells handles of one phase from another's, so a queue of phase A named in
/// phase B is rejected instead of silently meaning B's queue with that id.
static NEXT_PHASE_ID: AtomicU64 = AtomicU64::new(1);

/// What a stage body is: run once by each worker thread of the stage.
pub(crate) type StageBody = Arc<dyn Fn(&mut Worker) -> Result<()> + Send + Sync + 'static>;

/// A queue as declared.
pub(crate) struct QueueDecl {
    pub(crate) name: Arc<str>,
    pub(crate) capacity: usize,
    pub(crate) channel: Box<dyn ErasedChannel>,
}

/// A stage as declared.
pub(crate) struct StageDecl {
    pub(crate) spec: StageSpec,
    pub(crate) body: StageBody,
}

/// A queue named in a [`StageSpec`].
#[derive(Debug, Clone)]
pub(crate) struct QueueRef {
    pub(crate) phase_id: u64,
    pub(crate) queue: usize,
    pub(crate) name: Arc<str>,
}

/// A stage's name, worker count and the queues it reads and writes.
///
/// The declared queues are the *only* ones its workers may use: a worker
/// gets channel ends for them and nothing else, which is what lets the
/// runtime close a queue when the last worker of its writer stages returns.
#[derive(Debug, Clone)]
pub struct StageSpec {
    pub(crate) name: String,
    pub(crate) workers: usize,
    pub(crate) reads: Vec<QueueRef>,
    pub(crate) writes: Vec<QueueRef>,
}

impl StageSpec {
    /// A stage called `name` with `workers` threads (checked by
    /// [`PhaseBuilder::build`]: at least one).
    pub fn new(name: &str, workers: usize) -> Self {
        Self {
            name: name.to_string(),
            workers,
            reads: Vec::new(),
            writes: Vec::new(),
        }
    }

    /// Declares that the stage reads `queue` (its workers call
    /// [`Worker::recv`] on it). Declaring a queue twice is the same as once.
    pub fn reads<T>(mut self, queue: &Consumer<T>) -> Self {
        push_unique(
            &mut self.reads,
            QueueRef {
                phase_id: queue.phase_id,
                queue: queue.queue,
                name: Arc::clone(&queue.name),
            },
        );
        self
    }

    /// Declares that the stage writes `queue` (its workers call
    /// [`Worker::send`] on it); the queue closes once every worker of every
    /// stage that writes it has returned.
    pub fn writes<T>(mut self, queue: &Producer<T>) -> Self {
        push_unique(
            &mut self.writes,
            QueueRef {
                phase_id: queue.phase_id,
                queue: queue.queue,
                name: Arc::clone(&queue.name),
            },
        );
        self
    }

    /// The stage's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The stage's worker count.
    pub fn workers(&self) -> usize {
        self.workers
    }
}

fn push_unique(list: &mut Vec<QueueRef>, queue: QueueRef) {
    if !list
        .iter()
        .any(|known| known.phase_id == queue.phase_id && known.queue == queue.queue)
    {
        list.push(queue);
    }
}

/// A checked graph: every queue has writers and readers, and the stages
/// have a topological order.
pub(crate) struct Graph {
    pub(crate) id: u64,
    pub(crate) name: String,
    pub(crate) queues: Vec<QueueDecl>,
    pub(crate) stages: Vec<StageDecl>,
    /// Stage indices in topological order.
    pub(crate) order: Vec<usize>,
    /// Queue indices in the order of their first writer stage.
    pub(crate) queue_order: Vec<usize>,
}

/// A phase under construction: declare queues, then stages that use them,
/// then [`build`](Self::build) to check the graph and get a runnable
/// [`Phase`](crate::Phase).
///
/// Mistakes in `queue` and `stage` (a duplicate name, a zero capacity) are
/// collected and reported together by `build`, so declarations stay one
/// line each.
pub struct PhaseBuilder {
    id: u64,
    name: String,
    queues: Vec<QueueDecl>,
    stages: Vec<StageDecl>,
}

impl fmt::Debug for PhaseBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PhaseBuilder")
            .field("name", &self.name)
            .field(
                "queues",
                &self.queues.iter().map(|queue| &queue.name).collect::<Vec<_>>(),
            )
            .field(
                "stages",
                &self.stages.iter().map(|stage| &stage.spec).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl PhaseBuilder {
    /// An empty phase called `name` (the name prefixes errors and reports).
    pub fn new(name: &str) -> Self {
        Self {
            id: NEXT_PHASE_ID.fetch_add(1, Ordering::Relaxed),
            name: name.to_string(),
            queues: Vec::new(),
            stages: Vec::new(),
        }
    }

    /// A bounded multi-producer multi-consumer queue of at most `capacity`
    /// units: a full queue blocks `send` (back-pressure), so a fast stage
    /// cannot run ahead of a slow one by more than `capacity` units.
    /// `capacity` must be at least 1 (checked by `build`).
    pub fn queue<T: WorkUnit>(&mut self, name: &str, capacity: usize) -> (Producer<T>, Consumer<T>) {
        let (sender, receiver) = crossbeam_channel::bounded::<T>(capacity);
        let id = self.queues.len();
        let name: Arc<str> = Arc::from(name);
        self.queues.push(QueueDecl {
            name: Arc::clone(&name),
            capacity,
            channel: Box::new(TypedChannel { sender, receiver }),
        });
        (
            Producer::new(self.id, id, Arc::clone(&name)),
            Consumer::new(self.id, id, name),
        )
    }

    /// Declares a stage: each of `spec.workers()` threads runs `body` once,
    /// with its own [`Worker`]. A body typically loops on `recv` until
    /// `None`, or (a source) produces its share of the input and returns.
    pub fn stage<F>(&mut self, spec: StageSpec, body: F) -> &mut Self
    where
        F: Fn(&mut Worker) -> Result<()> + Send + Sync + 'static,
    {
        self.stages.push(StageDecl {
            spec,
            body: Arc::new(body),
        });
        self
    }

    /// Checks the graph: what [`build`](Self::build) runs before it makes
    /// the phase.
    pub(crate) fn check(self) -> Result<Graph> {
        let mut problems = Vec::new();
        if self.stages.is_empty() {
            problems.push("the phase has no stages".to_string());
        }
        let mut seen = BTreeSet::new();
        for queue in &self.queues {
            if queue.name.is_empty() {
                problems.push("a queue has an empty name".to_string());
            }
            if !seen.insert(&*queue.name) {
                problems.push(format!("two queues are named '{}'", queue.name));
            }
            if queue.capacity == 0 {
                problems.push(format!(
                    "queue '{}' has capacity 0 (must be at least 1)",
                    queue.name
                ));
            }
        }
        let mut seen = BTreeSet::new();
        let mut writers: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        let mut readers: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (stage_index, stage) in self.stages.iter().enumerate() {
            let spec = &stage.spec;
            if spec.name.is_empty() {
                problems.push("a stage has an empty name".to_string());
            }
            if !seen.insert(spec.name.as_str()) {
                problems.push(format!("two stages are named '{}'", spec.name));
            }
            if spec.workers == 0 {
                problems.push(format!(
                    "stage '{}' has 0 workers (must be at least 1)",
                    spec.name
                ));
            }
            for (queues, edges) in [(&spec.reads, &mut readers), (&spec.writes, &mut writers)] {
                for queue in queues {
                    if queue.phase_id != self.id || queue.queue >= self.queues.len() {
                        problems.push(format!(
                            "stage '{}' names queue '{}', which belongs to another phase",
                            spec.name, queue.name
                        ));
                    } else {
                        edges.entry(queue.queue).or_default().push(stage_index);
                    }
                }
            }
        }
        for (index, queue) in self.queues.iter().enumerate() {
            if !writers.contains_key(&index) {
                problems.push(format!("queue '{}' has no writer stage", queue.name));
            }
            if !readers.contains_key(&index) {
                problems.push(format!("queue '{}' has no reader stage", queue.name));
            }
        }
        let order = match topological_order(self.stages.len(), &writers, &readers) {
            Ok(order) => order,
            Err(cycle) => {
                let names: Vec<String> = cycle
                    .iter()
                    .map(|&stage| format!("'{}'", self.stages[stage].spec.name))
                    .collect();
                problems.push(format!(
                    "the stages {} form a cycle through their queues, so those queues could never close",
                    names.join(", ")
                ));
                (0..self.stages.len()).collect()
            }
        };
        if !problems.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "phase '{}' is not a valid graph: {}",
                self.name,
                problems.join("; ")
            )));
        }
        // Queues in the order of their first writer stage, then declaration.
        let position: Vec<usize> = {
            let mut position = vec![0; self.stages.len()];
            for (rank, &stage) in order.iter().enumerate() {
                position[stage] = rank;
            }
            position
        };
        let mut queue_order: Vec<usize> = (0..self.queues.len()).collect();
        queue_order.sort_by_key(|queue| {
            let first_writer = writers[queue].iter().map(|&stage| position[stage]).min();
            (first_writer, *queue)
        });
        Ok(Graph {
            id: self.id,
            name: self.name,
            queues: self.queues,
            stages: self.stages,
            order,
            queue_order,
        })
    }
}

/// Kahn's algorithm over the stage graph (an edge from each writer stage of
/// a queue to each of its reader stages), keeping declaration order among
/// stages that are ready together. On a cycle, returns the stages left.
fn topological_order(
    stages: usize,
    writers: &BTreeMap<usize, Vec<usize>>,
    readers: &BTreeMap<usize, Vec<usize>>,
) -> std::result::Result<Vec<usize>, Vec<usize>> {
    let mut successors: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); stages];
    for (queue, queue_writers) in writers {
        for &writer in queue_writers {
            for &reader in readers.get(queue).into_iter().flatten() {
                successors[writer].insert(reader);
            }
        }
    }
    let mut incoming = vec![0usize; stages];
    for next in &successors {
        for &stage in next {
            incoming[stage] += 1;
        }
    }
    let mut ready: BTreeSet<usize> = (0..stages).filter(|&stage| incoming[stage] == 0).collect();
    let mut order = Vec::with_capacity(stages);
    while let Some(stage) = ready.pop_first() {
        order.push(stage);
        for &next in &successors[stage] {
            incoming[next] -= 1;
            if incoming[next] == 0 {
                ready.insert(next);
            }
        }
    }
    if order.len() == stages {
        Ok(order)
    } else {
        Err((0..stages).filter(|&stage| incoming[stage] > 0).collect())
    }
}

/// Used by `Phase::describe`.
pub(crate) fn describe(phase: &Graph) -> String {
    use std::fmt::Write as _;
    let queue_label = |queue: &QueueRef| {
        let decl = &phase.queues[queue.queue];
        format!("'{}'({})", decl.name, decl.capacity)
    };
    let mut text = format!(
        "phase '{}': {} stage(s), {} queue(s)\n",
        phase.name,
        phase.stages.len(),
        phase.queues.len()
    );
    for &stage in &phase.order {
        let spec = &phase.stages[stage].spec;
        let _ = write!(text, "  stage '{}' x{}", spec.name, spec.workers);
        if !spec.reads.is_empty() {
            let reads: Vec<String> = spec.reads.iter().map(queue_label).collect();
            let _ = write!(text, " reads {}", reads.join(", "));
        }
        if !spec.writes.is_empty() {
            let writes: Vec<String> = spec.writes.iter().map(queue_label).collect();
            let _ = write!(text, " writes {}", writes.join(", "));
        }
        text.push('\n');
    }
    for &queue in &phase.queue_order {
        let decl = &phase.queues[queue];
        let stages_using = |pick: fn(&StageSpec) -> &Vec<QueueRef>| {
            phase
                .order
                .iter()
                .map(|&stage| &phase.stages[stage].spec)
                .filter(|spec| pick(spec).iter().any(|used| used.queue == queue))
                .map(|spec| format!("'{}'", spec.name))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            text,
            "  queue '{}' capacity {}: {} -> {}",
            decl.name,
            decl.capacity,
            stages_using(|spec| &spec.writes),
            stages_using(|spec| &spec.reads)
        );
    }
    text
}
