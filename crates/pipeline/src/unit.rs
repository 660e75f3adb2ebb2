//! Work units: what flows through queues.

use std::sync::Arc;

/// A unit of work flowing between stages (a buffer of records, a sorted run,
/// a list of buffers for one logical disk).
///
/// Its size feeds the per-stage byte counters, from which the report computes
/// each stage's throughput and finds the bottleneck (seed 003 Table 4.1), so
/// `bytes` should be the payload the stage is paid to process, not the
/// allocated capacity. It is called once per `send` and once per `recv` and
/// must be cheap.
pub trait WorkUnit: Send + 'static {
    /// The payload size in bytes.
    fn bytes(&self) -> u64;
}

impl WorkUnit for Vec<u8> {
    fn bytes(&self) -> u64 {
        self.len() as u64
    }
}

impl WorkUnit for Box<[u8]> {
    fn bytes(&self) -> u64 {
        self.len() as u64
    }
}

impl WorkUnit for Arc<[u8]> {
    fn bytes(&self) -> u64 {
        self.len() as u64
    }
}

impl WorkUnit for String {
    fn bytes(&self) -> u64 {
        self.len() as u64
    }
}
