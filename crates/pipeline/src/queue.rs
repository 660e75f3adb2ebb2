//! Queue handles and the type-erased queue table of a phase.
//!
//! A [`Producer`] and a [`Consumer`] are names, not channel ends: they hold
//! the phase id, the queue id and its name. The channel ends live in the
//! phase and, once it runs, in the workers of the stages that declared the
//! queue, so that a queue closes exactly when the last writer *worker*
//! returns, however many handles the stage bodies keep.

use std::any::Any;
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};

/// The sending side of a queue, as a stage body names it in
/// [`Worker::send`](crate::Worker::send) and [`StageSpec::writes`](crate::StageSpec::writes).
///
/// Cheap to clone (an `Arc` and two integers); keeping a clone does not keep
/// the queue open.
pub struct Producer<T> {
    pub(crate) phase_id: u64,
    pub(crate) queue: usize,
    pub(crate) name: Arc<str>,
    _unit: PhantomData<fn(T) -> T>,
}

/// The receiving side of a queue, as a stage body names it in
/// [`Worker::recv`](crate::Worker::recv) and [`StageSpec::reads`](crate::StageSpec::reads).
pub struct Consumer<T> {
    pub(crate) phase_id: u64,
    pub(crate) queue: usize,
    pub(crate) name: Arc<str>,
    _unit: PhantomData<fn(T) -> T>,
}

impl<T> Producer<T> {
    pub(crate) fn new(phase_id: u64, queue: usize, name: Arc<str>) -> Self {
        Self {
            phase_id,
            queue,
            name,
            _unit: PhantomData,
        }
    }

    /// The queue's name, as given to [`PhaseBuilder::queue`](crate::PhaseBuilder::queue).
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl<T> Consumer<T> {
    pub(crate) fn new(phase_id: u64, queue: usize, name: Arc<str>) -> Self {
        Self {
            phase_id,
            queue,
            name,
            _unit: PhantomData,
        }
    }

    /// The queue's name, as given to [`PhaseBuilder::queue`](crate::PhaseBuilder::queue).
    pub fn name(&self) -> &str {
        &self.name
    }
}

// Manual impls: a derive would require `T: Clone` / `T: Debug`, which the
// handles do not need.
impl<T> Clone for Producer<T> {
    fn clone(&self) -> Self {
        Self::new(self.phase_id, self.queue, Arc::clone(&self.name))
    }
}

impl<T> Clone for Consumer<T> {
    fn clone(&self) -> Self {
        Self::new(self.phase_id, self.queue, Arc::clone(&self.name))
    }
}

impl<T> fmt::Debug for Producer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Producer").field("queue", &self.name).finish()
    }
}

impl<T> fmt::Debug for Consumer<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Consumer").field("queue", &self.name).finish()
    }
}

/// The channel of one queue with its element type erased, so that a phase
/// can hold queues of different unit types in one table and hand each worker
/// its own ends.
pub(crate) trait ErasedChannel: Send {
    /// A new `Sender<T>`, boxed.
    fn sender(&self) -> Box<dyn ErasedEnd>;
    /// A new `Receiver<T>`, boxed.
    fn receiver(&self) -> Box<dyn ErasedEnd>;
}

pub(crate) struct TypedChannel<T> {
    pub(crate) sender: Sender<T>,
    pub(crate) receiver: Receiver<T>,
}

impl<T: Send + 'static> ErasedChannel for TypedChannel<T> {
    fn sender(&self) -> Box<dyn ErasedEnd> {
        Box::new(self.sender.clone())
    }

    fn receiver(&self) -> Box<dyn ErasedEnd> {
        Box::new(self.receiver.clone())
    }
}

/// A channel end with its element type erased: the typed end for the hot
/// path (by downcast) and its length for the drain check.
pub(crate) trait ErasedEnd: Send {
    fn as_any(&self) -> &dyn Any;
    fn len(&self) -> usize;
}

impl<T: Send + 'static> ErasedEnd for Sender<T> {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn len(&self) -> usize {
        Sender::len(self)
    }
}

impl<T: Send + 'static> ErasedEnd for Receiver<T> {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn len(&self) -> usize {
        Receiver::len(self)
    }
}

/// What the running phase knows about a queue besides its channel: shared
/// by the workers (to close and check it) and by the monitor (to describe
/// waits and build the report).
#[derive(Debug)]
pub(crate) struct QueueInfo {
    pub(crate) name: Arc<str>,
    pub(crate) capacity: usize,
    /// Names of the stages that write it, for messages.
    pub(crate) writer_stages: Vec<String>,
    /// Writer workers that have not returned. The channel closes when this
    /// reaches zero, because each writer worker holds the only `Sender`s.
    pub(crate) live_writers: AtomicUsize,
    /// Reader workers that have not returned; the last one checks that the
    /// queue was drained.
    pub(crate) live_readers: AtomicUsize,
    /// The largest depth a writer saw right after one of its sends.
    pub(crate) depth_max: AtomicUsize,
}
