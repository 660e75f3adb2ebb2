//! What a blocked worker waits for, published in its slot so that the
//! phase's monitor can tell "blocked" from "working" and say what is
//! missing.
//!
//! A worker blocks on a queue (empty or full) or on a [`Resource`]: quota
//! memory, a pooled buffer, a disk token. Each resource describes its own
//! wait, so that this module, the worker context and the monitor stand
//! below the memory and disk modules instead of naming their types.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::queue::QueueInfo;

/// How often a worker waiting on a condition variable rechecks whether the
/// phase was cancelled (quotas and disks are shared between phases, so they
/// cannot be woken by one phase's cancellation).
pub(crate) const CANCEL_POLL: Duration = Duration::from_millis(20);

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

/// Something besides a queue that a worker can wait for.
pub(crate) trait Resource: Send + Sync + fmt::Debug {
    /// A number that changes whenever the awaited resource changes hands,
    /// so that a freed byte of quota or a returned token resets the
    /// detector's window even if no blocked worker could use it yet.
    fn state(&self) -> u64;

    /// Tells this wait from other waits in a probe's signature.
    fn code(&self) -> u64;

    /// One line saying what is awaited and how much of it there is.
    fn describe(&self) -> String;
}

/// What a blocked worker waits for.
#[derive(Debug, Clone)]
pub(crate) enum Wait {
    /// A unit from the queue with this id (the queue is empty).
    Input { queue: usize },
    /// Room in the queue with this id (the queue is full).
    Output { queue: usize },
    /// Memory, a buffer or a disk token, counted as `blocked`.
    Resource {
        blocked: Blocked,
        resource: Arc<dyn Resource>,
    },
}

impl Wait {
    /// See [`Resource::state`]; a queue's waits have none.
    pub(crate) fn resource_state(&self) -> u64 {
        match self {
            Wait::Input { .. } | Wait::Output { .. } => 0,
            Wait::Resource { resource, .. } => resource.state(),
        }
    }

    /// Distinguishes wait kinds in a probe signature.
    pub(crate) fn code(&self) -> u64 {
        match self {
            Wait::Input { queue } => (*queue as u64) << 3,
            Wait::Output { queue } => ((*queue as u64) << 3) | 1,
            Wait::Resource { resource, .. } => resource.code(),
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
            Wait::Resource { resource, .. } => resource.describe(),
        }
    }

    /// Which blocked time this wait is charged to.
    pub(crate) fn blocked(&self) -> Blocked {
        match self {
            Wait::Input { .. } => Blocked::Input,
            Wait::Output { .. } => Blocked::Output,
            Wait::Resource { blocked, .. } => *blocked,
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
