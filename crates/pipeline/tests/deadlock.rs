//! The deadlock detector fires when every running worker waits with
//! nothing changing hands, names every wait, and stays quiet while someone
//! works.

mod common;

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use common::{run_within, unit};
use spillway_core::ErrorKind;
use spillway_pipeline::{BufferPool, MemoryQuota, PhaseBuilder, StageSpec};

const LIMIT: Duration = Duration::from_secs(10);
const WINDOW: Duration = Duration::from_millis(300);

#[test]
fn two_workers_holding_quota_and_waiting_for_more_are_reported() {
    let quota = MemoryQuota::new("merge", 100);
    let both_hold = Arc::new(Barrier::new(2));
    let mut phase = PhaseBuilder::new("hoarders");
    let stage_quota = quota.clone();
    phase.stage(StageSpec::new("hoarder", 2), move |worker| {
        let _first = worker.allocate(&stage_quota, 40)?;
        both_hold.wait();
        // 20 bytes are free; each needs 40 more and neither will let go.
        let _second = worker.allocate(&stage_quota, 40)?;
        Ok(())
    });
    let mut phase = phase.build().unwrap();
    phase.set_deadlock_timeout(WINDOW);
    let (result, elapsed) = run_within(phase, LIMIT);
    let error = result.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::ResourcesExhausted);
    let message = error.to_string();
    assert!(message.contains("deadlock in phase 'hoarders'"), "{message}");
    for index in 0..2 {
        assert!(
            message.contains(&format!(
                "stage 'hoarder' worker {index}: waits for 40 bytes of memory quota 'merge' (20 of 100 bytes free)"
            )),
            "{message}"
        );
    }
    assert!(elapsed >= WINDOW, "fired before the window: {elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    assert_eq!(
        quota.used_bytes(),
        0,
        "the cancelled workers released what they held"
    );
}

#[test]
fn a_reader_waiting_on_a_writer_blocked_on_memory_is_reported() {
    let quota = MemoryQuota::new("reader-memory", 1_000);
    let mut phase = PhaseBuilder::new("starved");
    let (out, input) = phase.queue::<Vec<u8>>("blocks", 4);
    let stage_quota = quota;
    phase.stage(StageSpec::new("reader", 1).writes(&out), move |worker| {
        let _all = worker.allocate(&stage_quota, 1_000)?;
        let _one_more = worker.allocate(&stage_quota, 1)?;
        worker.send(&out, unit(1))
    });
    phase.stage(StageSpec::new("sorter", 2).reads(&input), move |worker| {
        while worker.recv(&input)?.is_some() {}
        Ok(())
    });
    let mut phase = phase.build().unwrap();
    phase.set_deadlock_timeout(WINDOW);
    let (result, elapsed) = run_within(phase, LIMIT);
    let error = result.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::ResourcesExhausted);
    let message = error.to_string();
    assert!(message.contains("deadlock"), "{message}");
    assert!(
        message.contains(
            "stage 'reader' worker 0: waits for 1 bytes of memory quota 'reader-memory' (0 of 1000 bytes free)"
        ),
        "{message}"
    );
    for index in 0..2 {
        assert!(
            message.contains(&format!(
                "stage 'sorter' worker {index}: waits for input from queue 'blocks' (empty; 1 writer \
                 worker(s) of stage(s) 'reader' still running)"
            )),
            "{message}"
        );
    }
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
}

#[test]
fn a_full_queue_whose_reader_waits_for_a_buffer_is_reported() {
    let pool = BufferPool::new("ld-buffers", 1, 16);
    let mut phase = PhaseBuilder::new("pool-cycle");
    let (out, input) = phase.queue::<Vec<u8>>("narrow", 1);
    let source_pool = pool.clone();
    phase.stage(StageSpec::new("source", 1).writes(&out), move |worker| {
        // Holds the only buffer while it fills the queue and then blocks on it.
        let _held = worker.take(&source_pool)?;
        for n in 0..10 {
            worker.send(&out, unit(n))?;
        }
        Ok(())
    });
    let sink_pool = pool.clone();
    phase.stage(StageSpec::new("sink", 1).reads(&input), move |worker| {
        thread::sleep(Duration::from_millis(20));
        let _buffer = worker.take(&sink_pool)?;
        while worker.recv(&input)?.is_some() {}
        Ok(())
    });
    let mut phase = phase.build().unwrap();
    phase.set_deadlock_timeout(WINDOW);
    let (result, _) = run_within(phase, LIMIT);
    let message = result.unwrap_err().to_string();
    assert!(
        message.contains("stage 'source' worker 0: waits for room in queue 'narrow' (full: 1 of 1 units)")
    );
    assert!(
        message.contains(
            "stage 'sink' worker 0: waits for a buffer from pool 'ld-buffers' (0 of 1 buffers free)"
        ),
        "{message}"
    );
    assert_eq!(pool.available(), 1);
}

#[test]
fn a_worker_doing_real_work_is_never_counted_as_blocked() {
    let mut phase = PhaseBuilder::new("slow-but-alive");
    let (out, input) = phase.queue::<Vec<u8>>("q", 1);
    phase.stage(StageSpec::new("slow", 1).writes(&out), move |worker| {
        // Busy for 3 windows while everyone else waits on it.
        thread::sleep(WINDOW * 3);
        worker.send(&out, unit(1))
    });
    phase.stage(StageSpec::new("waiting", 3).reads(&input), move |worker| {
        while worker.recv(&input)?.is_some() {}
        Ok(())
    });
    let mut phase = phase.build().unwrap();
    phase.set_deadlock_timeout(WINDOW);
    let (result, _) = run_within(phase, LIMIT);
    let report = result.unwrap();
    assert_eq!(report.stage("waiting").unwrap().units_in, 1);
}

#[test]
fn memory_changing_hands_outside_the_phase_resets_the_window() {
    // The only worker waits longer than the window, but the quota keeps
    // changing hands (a thread outside the phase frees it bit by bit), so
    // the wait may still end: not a deadlock.
    let quota = MemoryQuota::new("drip", 100);
    let mut held = quota.try_allocate(100).unwrap().unwrap();
    let dripper = thread::spawn(move || {
        for _ in 0..10 {
            thread::sleep(Duration::from_millis(40));
            drop(held.split_off(10));
        }
    });
    let mut phase = PhaseBuilder::new("dripping");
    let stage_quota = quota;
    phase.stage(StageSpec::new("patient", 1), move |worker| {
        let allocation = worker.allocate(&stage_quota, 60)?;
        assert_eq!(allocation.bytes(), 60);
        Ok(())
    });
    let mut phase = phase.build().unwrap();
    phase.set_deadlock_timeout(Duration::from_millis(120));
    let (result, elapsed) = run_within(phase, LIMIT);
    let report = result.unwrap();
    assert!(elapsed >= Duration::from_millis(200), "{elapsed:?}");
    assert!(
        report.stage("patient").unwrap().blocked_memory >= Duration::from_millis(200),
        "{report}"
    );
    dripper.join().unwrap();
}
