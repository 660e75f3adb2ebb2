//! What a phase reports: per-stage bytes, busy and blocked time, and the
//! throughput each stage could sustain, so the bottleneck is found by
//! reading one table (seed 003 Table 4.1).

use std::fmt;
use std::fmt::Write as _;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::context::WorkerSlot;
use crate::queue::QueueInfo;

/// Bytes per megabyte in every MB and MB/s this crate prints (decimal, as
/// the seed's tables are).
pub const BYTES_PER_MB: f64 = 1_000_000.0;

/// One phase run: its wall time and one row per stage, in topological order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PhaseReport {
    /// The phase's name.
    pub name: String,
    /// Wall time from the first thread started to the last joined (seconds
    /// in JSON).
    #[serde(with = "spillway_core::seconds")]
    pub elapsed: Duration,
    /// The phase's input: bytes in of the source stages (stages that read
    /// no queue), or their bytes out where they counted no input.
    pub bytes_in: u64,
    /// One row per stage, in topological order.
    pub stages: Vec<StageReport>,
    /// One row per queue, in the order of their writer stages.
    pub queues: Vec<QueueReport>,
}

/// One stage's counters, summed over its workers.
///
/// `busy + blocked_input + blocked_output + blocked_memory` is the sum of
/// the workers' wall times.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StageReport {
    /// The stage's name.
    pub name: String,
    /// Worker threads.
    pub workers: usize,
    /// Units received (`recv`) plus units counted with `count_in`.
    pub units_in: u64,
    /// Bytes of those units ([`WorkUnit::bytes`](crate::WorkUnit::bytes)).
    pub bytes_in: u64,
    /// Units sent (`send`) plus units counted with `count_out`.
    pub units_out: u64,
    /// Bytes of those units.
    pub bytes_out: u64,
    /// Wall time not spent in a wait call: real work, summed over workers.
    #[serde(with = "spillway_core::seconds")]
    pub busy: Duration,
    /// Time waiting for units (`recv`) and read tokens.
    #[serde(with = "spillway_core::seconds")]
    pub blocked_input: Duration,
    /// Time waiting for room in full queues (`send`) and write tokens.
    #[serde(with = "spillway_core::seconds")]
    pub blocked_output: Duration,
    /// Time waiting for quota memory (`allocate`) and pooled buffers (`take`).
    #[serde(with = "spillway_core::seconds")]
    pub blocked_memory: Duration,
}

/// One queue's shape and how full it got.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QueueReport {
    /// The queue's name.
    pub name: String,
    /// Its capacity in units.
    pub capacity: usize,
    /// The most units it held, as seen by its writers right after a send;
    /// never above `capacity`. A queue that reaches its capacity means its
    /// readers were slower than its writers at some point.
    pub depth_max: usize,
}

impl StageReport {
    /// The bytes the throughput is computed from: bytes in, or bytes out for
    /// a stage that counted no input (a generator).
    pub fn throughput_bytes(&self) -> u64 {
        if self.bytes_in > 0 {
            self.bytes_in
        } else {
            self.bytes_out
        }
    }

    /// The rate the stage could sustain if it never waited, in bytes per
    /// second: `throughput_bytes / (busy / workers)`, i.e. bytes over the
    /// busy time of an average worker. `None` for a stage with no bytes or
    /// no busy time.
    pub fn throughput_bytes_per_second(&self) -> Option<f64> {
        let bytes = self.throughput_bytes();
        let busy_per_worker = self.busy.as_secs_f64() / self.workers.max(1) as f64;
        // Below a millisecond of work the rate is noise (a stage that only
        // hands buffers on), not a capacity: report none.
        (bytes > 0 && busy_per_worker >= BUSY_SECONDS_MIN).then(|| bytes as f64 / busy_per_worker)
    }
}

/// Busy time per worker below which a stage's throughput is not reported.
const BUSY_SECONDS_MIN: f64 = 1e-3;

impl PhaseReport {
    /// The stage with the lowest throughput: the one that limits the phase.
    pub fn bottleneck(&self) -> Option<&StageReport> {
        self.stages
            .iter()
            .filter_map(|stage| stage.throughput_bytes_per_second().map(|rate| (stage, rate)))
            .min_by(|left, right| left.1.total_cmp(&right.1))
            .map(|(stage, _)| stage)
    }

    /// The stage called `name`, if any.
    pub fn stage(&self, name: &str) -> Option<&StageReport> {
        self.stages.iter().find(|stage| stage.name == name)
    }

    /// The phase's input over its wall time, in bytes per second.
    pub fn bytes_per_second(&self) -> f64 {
        let seconds = self.elapsed.as_secs_f64();
        if seconds > 0.0 {
            self.bytes_in as f64 / seconds
        } else {
            0.0
        }
    }

    /// A table like seed 003 Table 4.1: one row per stage with MB in and
    /// out, busy and blocked seconds and MB/s, the bottleneck marked.
    pub fn table(&self) -> String {
        let mut text = format!(
            "phase '{}': {:.3} s, {:.1} MB in, {:.1} MB/s overall\n",
            self.name,
            self.elapsed.as_secs_f64(),
            self.bytes_in as f64 / BYTES_PER_MB,
            self.bytes_per_second() / BYTES_PER_MB
        );
        let name_width = self
            .stages
            .iter()
            .map(|stage| stage.name.len())
            .chain([5])
            .max()
            .unwrap_or(5);
        let _ = writeln!(
            text,
            "{:<name_width$} {:>7} {:>10} {:>10} {:>9} {:>12} {:>13} {:>13} {:>10}",
            "stage",
            "workers",
            "MB in",
            "MB out",
            "busy s",
            "blocked in s",
            "blocked out s",
            "blocked mem s",
            "MB/s"
        );
        let bottleneck = self.bottleneck().map(|stage| stage.name.as_str());
        for stage in &self.stages {
            let rate = match stage.throughput_bytes_per_second() {
                Some(rate) => format!("{:.1}", rate / BYTES_PER_MB),
                None => "-".to_string(),
            };
            let _ = write!(
                text,
                "{:<name_width$} {:>7} {:>10.3} {:>10.3} {:>9.3} {:>12.3} {:>13.3} {:>13.3} {:>10}",
                stage.name,
                stage.workers,
                stage.bytes_in as f64 / BYTES_PER_MB,
                stage.bytes_out as f64 / BYTES_PER_MB,
                stage.busy.as_secs_f64(),
                stage.blocked_input.as_secs_f64(),
                stage.blocked_output.as_secs_f64(),
                stage.blocked_memory.as_secs_f64(),
                rate
            );
            if bottleneck == Some(stage.name.as_str()) {
                text.push_str("  <- bottleneck");
            }
            text.push('\n');
        }
        for queue in &self.queues {
            let _ = writeln!(
                text,
                "queue '{}': capacity {}, max depth {}",
                queue.name, queue.capacity, queue.depth_max
            );
        }
        text
    }

    /// The report as pretty-printed JSON (durations in seconds).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report has only strings, numbers and lists")
    }
}

impl fmt::Display for PhaseReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.table())
    }
}

/// Where a stage's workers sit in the phase's slot list.
#[derive(Debug, Clone)]
pub(crate) struct StageLayout {
    pub(crate) name: String,
    pub(crate) workers: usize,
    /// Reads no queue: its input is the phase's input.
    pub(crate) source: bool,
    pub(crate) slots: Range<usize>,
}

/// Builds a report from the workers' slots. Workers still running (for a
/// progress report) are charged `elapsed` of wall time so far.
pub(crate) fn collect(
    name: &str,
    elapsed: Duration,
    stages: &[StageLayout],
    slots: &[Arc<WorkerSlot>],
    queues: &[QueueInfo],
    queue_order: &[usize],
) -> PhaseReport {
    let mut bytes_in = 0;
    let stages: Vec<StageReport> = stages
        .iter()
        .map(|layout| {
            let mut report = StageReport {
                name: layout.name.clone(),
                workers: layout.workers,
                units_in: 0,
                bytes_in: 0,
                units_out: 0,
                bytes_out: 0,
                busy: Duration::ZERO,
                blocked_input: Duration::ZERO,
                blocked_output: Duration::ZERO,
                blocked_memory: Duration::ZERO,
            };
            for slot in &slots[layout.slots.clone()] {
                report.units_in += slot.units_in.load(Ordering::Relaxed);
                report.bytes_in += slot.bytes_in.load(Ordering::Relaxed);
                report.units_out += slot.units_out.load(Ordering::Relaxed);
                report.bytes_out += slot.bytes_out.load(Ordering::Relaxed);
                let blocked = slot
                    .blocked_nanos
                    .each_ref()
                    .map(|nanos| nanos.load(Ordering::Relaxed));
                let wall = if slot.finished.load(Ordering::Acquire) {
                    slot.wall_nanos.load(Ordering::Relaxed)
                } else {
                    u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX)
                };
                let blocked_total = blocked.iter().fold(0u64, |sum, nanos| sum.saturating_add(*nanos));
                report.busy += Duration::from_nanos(wall.saturating_sub(blocked_total));
                report.blocked_input += Duration::from_nanos(blocked[0]);
                report.blocked_output += Duration::from_nanos(blocked[1]);
                report.blocked_memory += Duration::from_nanos(blocked[2]);
            }
            if layout.source {
                bytes_in += report.throughput_bytes();
            }
            report
        })
        .collect();
    let queues = queue_order
        .iter()
        .map(|&queue| {
            let info = &queues[queue];
            QueueReport {
                name: info.name.to_string(),
                capacity: info.capacity,
                depth_max: info.depth_max.load(Ordering::Relaxed),
            }
        })
        .collect();
    PhaseReport {
        name: name.to_string(),
        elapsed,
        bytes_in,
        stages,
        queues,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(name: &str, workers: usize, bytes_in: u64, busy_ms: u64) -> StageReport {
        StageReport {
            name: name.to_string(),
            workers,
            units_in: 1,
            bytes_in,
            units_out: 1,
            bytes_out: bytes_in,
            busy: Duration::from_millis(busy_ms),
            blocked_input: Duration::from_millis(5),
            blocked_output: Duration::ZERO,
            blocked_memory: Duration::ZERO,
        }
    }

    #[test]
    fn throughput_is_bytes_over_busy_time_per_worker() {
        // 100 MB over 4 workers busy 2 s in all: each worker busy 0.5 s -> 200 MB/s.
        let sorter = stage("sorter", 4, 100_000_000, 2_000);
        let rate = sorter.throughput_bytes_per_second().unwrap() / BYTES_PER_MB;
        assert!((rate - 200.0).abs() < 1e-9, "{rate}");
        assert_eq!(stage("idle", 1, 0, 10).throughput_bytes_per_second(), None);
    }

    #[test]
    fn table_marks_the_slowest_stage_and_json_round_trips() {
        let report = PhaseReport {
            name: "one".into(),
            elapsed: Duration::from_millis(1500),
            bytes_in: 100_000_000,
            stages: vec![
                stage("reader", 8, 100_000_000, 8_000),
                stage("writer", 1, 100_000_000, 1_000),
                stage("coalescer", 1, 100_000_000, 10),
            ],
            queues: vec![QueueReport {
                name: "buffers".into(),
                capacity: 4,
                depth_max: 4,
            }],
        };
        // reader: 100 MB / (8 s / 8) = 100 MB/s; writer 100 MB/s too; coalescer 10,000 MB/s.
        // Ties go to the first stage in order.
        assert_eq!(report.bottleneck().unwrap().name, "reader");
        let table = report.to_string();
        let marked: Vec<&str> = table
            .lines()
            .filter(|line| line.contains("<- bottleneck"))
            .collect();
        assert_eq!(marked.len(), 1, "{table}");
        assert!(marked[0].starts_with("reader"), "{table}");
        assert!(
            table.contains("queue 'buffers': capacity 4, max depth 4"),
            "{table}"
        );
        assert!(table.contains("66.7 MB/s overall"), "{table}");

        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(json["stages"][1]["name"], "writer");
        assert_eq!(json["elapsed"], 1.5);
        let back: PhaseReport = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(back.stages[0].busy, Duration::from_secs(8));
    }
}
