//! Helpers shared by the scenario tests.
#![allow(dead_code)]

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use spillway_core::Result;
use spillway_pipeline::{Phase, PhaseReport};

/// Runs `phase` on another thread and fails the test if it has not returned
/// within `limit` (a hang is a bug, not a slow test).
pub fn run_within(phase: Phase, limit: Duration) -> (Result<PhaseReport>, Duration) {
    let (sender, receiver) = mpsc::channel();
    let started = Instant::now();
    thread::spawn(move || {
        let result = phase.run();
        let _ = sender.send(result);
    });
    match receiver.recv_timeout(limit) {
        Ok(result) => (result, started.elapsed()),
        Err(_) => panic!("the phase did not return within {limit:?}"),
    }
}

/// A unit of one u64.
pub fn unit(value: u64) -> Vec<u8> {
    value.to_le_bytes().to_vec()
}

/// The value of a unit made by [`unit`].
pub fn value(unit: &[u8]) -> u64 {
    u64::from_le_bytes(unit[..8].try_into().unwrap())
}
