//! Units move through a phase exactly once; queues close when their writers
//! return; back-pressure; describe and report output.

mod common;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::{run_within, unit, value};
use spillway_core::ErrorKind;
use spillway_pipeline::{PhaseBuilder, StageSpec};

const LIMIT: Duration = Duration::from_secs(10);

#[test]
fn three_stages_move_every_unit_exactly_once() {
    const UNITS: u64 = 20_000;
    let mut phase = PhaseBuilder::new("checksum");
    let (raw_out, raw_in) = phase.queue::<Vec<u8>>("raw", 8);
    let (cooked_out, cooked_in) = phase.queue::<Vec<u8>>("cooked", 8);
    phase.stage(StageSpec::new("source", 3).writes(&raw_out), move |worker| {
        for n in (worker.index() as u64..UNITS).step_by(worker.workers()) {
            worker.send(&raw_out, unit(n))?;
        }
        Ok(())
    });
    phase.stage(
        StageSpec::new("double", 4).reads(&raw_in).writes(&cooked_out),
        move |worker| {
            while let Some(raw) = worker.recv(&raw_in)? {
                worker.send(&cooked_out, unit(value(&raw) * 2 + 1))?;
            }
            Ok(())
        },
    );
    let seen = Arc::new(Mutex::new(vec![0u32; UNITS as usize]));
    let sum = Arc::new(AtomicU64::new(0));
    let (seen_by_sink, sum_by_sink) = (Arc::clone(&seen), Arc::clone(&sum));
    phase.stage(StageSpec::new("sink", 2).reads(&cooked_in), move |worker| {
        let mut local = Vec::new();
        while let Some(cooked) = worker.recv(&cooked_in)? {
            local.push(value(&cooked));
        }
        let mut seen = seen_by_sink.lock().unwrap();
        for cooked in local {
            seen[((cooked - 1) / 2) as usize] += 1;
            sum_by_sink.fetch_add(cooked, Ordering::Relaxed);
        }
        Ok(())
    });
    let (result, _) = run_within(phase.build().unwrap(), LIMIT);
    let report = result.unwrap();

    assert!(
        seen.lock().unwrap().iter().all(|&count| count == 1),
        "a unit was lost or duplicated"
    );
    assert_eq!(
        sum.load(Ordering::Relaxed),
        (0..UNITS).map(|n| n * 2 + 1).sum::<u64>()
    );
    let stage = |name: &str| report.stage(name).unwrap().clone();
    assert_eq!(stage("source").units_out, UNITS);
    assert_eq!(stage("double").units_in, UNITS);
    assert_eq!(stage("double").units_out, UNITS);
    assert_eq!(stage("double").bytes_in, UNITS * 8);
    assert_eq!(stage("sink").units_in, UNITS);
    assert_eq!(stage("sink").workers, 2);
    assert_eq!(
        report.bytes_in,
        UNITS * 8,
        "a generator's bytes out are the phase's input"
    );
    for queue in &report.queues {
        assert!(queue.depth_max <= queue.capacity, "{queue:?}");
    }
}

#[test]
fn a_queue_closes_only_when_every_writer_stage_has_returned() {
    let mut phase = PhaseBuilder::new("closing");
    let (out, input) = phase.queue::<Vec<u8>>("merged", 4);
    let early = out.clone();
    phase.stage(StageSpec::new("early", 1).writes(&early), move |worker| {
        worker.send(&early, unit(1))
    });
    let late = out.clone();
    phase.stage(StageSpec::new("late", 2).writes(&late), move |worker| {
        thread::sleep(Duration::from_millis(50 * (worker.index() as u64 + 1)));
        worker.send(&late, unit(10))
    });
    // The bodies keep clones of the producer in their closures (and here in
    // a static-like Arc) for the whole run; that must not keep the queue open.
    let kept = Arc::new(Mutex::new(Some(out)));
    let received = Arc::new(AtomicU64::new(0));
    let total = Arc::clone(&received);
    phase.stage(StageSpec::new("reader", 1).reads(&input), move |worker| {
        let _keep = kept.lock().unwrap().clone();
        while let Some(unit) = worker.recv(&input)? {
            total.fetch_add(value(&unit), Ordering::Relaxed);
        }
        Ok(())
    });
    let (result, _) = run_within(phase.build().unwrap(), LIMIT);
    result.unwrap();
    assert_eq!(
        received.load(Ordering::Relaxed),
        21,
        "the reader stopped before the late writers sent"
    );
}

#[test]
fn a_slow_consumer_keeps_a_fast_producer_blocked_on_output() {
    const CAPACITY: usize = 3;
    let mut phase = PhaseBuilder::new("back-pressure");
    let (out, input) = phase.queue::<Vec<u8>>("narrow", CAPACITY);
    // Count what the queue holds from the outside too: incremented before a
    // send starts and decremented after a recv returns, it can only
    // overestimate the depth by the units in flight (at most 1 + 1 here).
    let depth = Arc::new(AtomicUsize::new(0));
    let depth_max = Arc::new(AtomicUsize::new(0));
    let (producer_depth, consumer_depth) = (Arc::clone(&depth), Arc::clone(&depth));
    let depth_seen = Arc::clone(&depth_max);
    phase.stage(StageSpec::new("fast", 1).writes(&out), move |worker| {
        for n in 0..20 {
            worker.send(&out, unit(n))?;
            let now = producer_depth.fetch_add(1, Ordering::SeqCst) + 1;
            depth_seen.fetch_max(now, Ordering::SeqCst);
        }
        Ok(())
    });
    phase.stage(StageSpec::new("slow", 1).reads(&input), move |worker| {
        while let Some(_unit) = worker.recv(&input)? {
            thread::sleep(Duration::from_millis(3));
            consumer_depth.fetch_sub(1, Ordering::SeqCst);
        }
        Ok(())
    });
    let (result, _) = run_within(phase.build().unwrap(), LIMIT);
    let report = result.unwrap();
    let fast = report.stage("fast").unwrap();
    let slow = report.stage("slow").unwrap();
    assert!(fast.blocked_output > Duration::ZERO, "{report}");
    assert!(fast.blocked_output > slow.blocked_input, "{report}");
    assert_eq!(
        report.queues[0].depth_max, CAPACITY,
        "the queue should fill up: {report}"
    );
    // The producer counts after its send returns and the consumer while it
    // holds one unit: the count exceeds the real depth by at most one.
    assert!(
        depth_max.load(Ordering::SeqCst) <= CAPACITY + 1,
        "{}",
        depth_max.load(Ordering::SeqCst)
    );
    assert_eq!(slow.units_in, 20);
}

#[test]
fn describe_lists_stages_in_topological_order_and_queues_with_capacities() {
    let mut phase = PhaseBuilder::new("shape");
    let (a_out, a_in) = phase.queue::<Vec<u8>>("to-sorter", 16);
    let (b_out, b_in) = phase.queue::<Vec<u8>>("to-writer", 8);
    // Declared out of order on purpose.
    phase.stage(StageSpec::new("writer", 8).reads(&b_in), |_| Ok(()));
    phase.stage(
        StageSpec::new("sorter", 4).reads(&a_in).writes(&b_out),
        |_| Ok(()),
    );
    phase.stage(StageSpec::new("reader", 2).writes(&a_out), |_| Ok(()));
    let phase = phase.build().unwrap();
    let text = phase.describe();
    let expected = "phase 'shape': 3 stage(s), 2 queue(s)\n\
                    \x20 stage 'reader' x2 writes 'to-sorter'(16)\n\
                    \x20 stage 'sorter' x4 reads 'to-sorter'(16) writes 'to-writer'(8)\n\
                    \x20 stage 'writer' x8 reads 'to-writer'(8)\n\
                    \x20 queue 'to-sorter' capacity 16: 'reader' -> 'sorter'\n\
                    \x20 queue 'to-writer' capacity 8: 'sorter' -> 'writer'\n";
    assert_eq!(text, expected);
    let (result, _) = run_within(phase, LIMIT);
    let report = result.unwrap();
    let names: Vec<&str> = report.stages.iter().map(|stage| stage.name.as_str()).collect();
    assert_eq!(names, ["reader", "sorter", "writer"]);
}

#[test]
fn report_table_lists_every_stage_and_json_parses() {
    let mut phase = PhaseBuilder::new("report");
    let (out, input) = phase.queue::<Vec<u8>>("blocks", 4);
    phase.stage(StageSpec::new("reader", 2).writes(&out), move |worker| {
        for _ in 0..50 {
            let block = vec![7u8; 4096];
            worker.count_in(block.len() as u64);
            worker.send(&out, block)?;
        }
        Ok(())
    });
    phase.stage(StageSpec::new("writer", 1).reads(&input), move |worker| {
        while let Some(block) = worker.recv(&input)? {
            // Slow on purpose: the writer is the bottleneck.
            thread::sleep(Duration::from_micros(300));
            worker.count_out(block.len() as u64);
        }
        Ok(())
    });
    let progress_calls = Arc::new(AtomicUsize::new(0));
    let calls = Arc::clone(&progress_calls);
    let mut phase = phase.build().unwrap();
    phase.set_progress(Duration::from_millis(5), move |report| {
        assert_eq!(report.stages.len(), 2);
        calls.fetch_add(1, Ordering::Relaxed);
    });
    let (result, _) = run_within(phase, LIMIT);
    let report = result.unwrap();
    assert!(progress_calls.load(Ordering::Relaxed) >= 1);

    let table = report.table();
    for name in [
        "reader",
        "writer",
        "MB/s",
        "busy s",
        "blocked in s",
        "blocked out s",
        "blocked mem s",
    ] {
        assert!(table.contains(name), "{name} missing from\n{table}");
    }
    assert_eq!(report.bytes_in, 100 * 4096);
    assert_eq!(report.stage("writer").unwrap().bytes_out, 100 * 4096);
    assert_eq!(report.bottleneck().unwrap().name, "writer", "{table}");
    let marked = table.lines().find(|line| line.contains("<- bottleneck")).unwrap();
    assert!(marked.starts_with("writer"), "{table}");
    assert_eq!(table, report.to_string());

    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    assert_eq!(json["name"], "report");
    assert_eq!(json["stages"].as_array().unwrap().len(), 2);
    assert_eq!(json["stages"][0]["name"], "reader");
    assert_eq!(json["stages"][0]["units_out"], 100);
    assert!(json["elapsed"].as_f64().unwrap() > 0.0);
    assert!(json["stages"][1]["busy"].as_f64().unwrap() > 0.0);
    assert_eq!(json["queues"][0]["capacity"], 4);
}

#[test]
fn using_an_undeclared_queue_fails() {
    let mut phase = PhaseBuilder::new("undeclared");
    let (out, input) = phase.queue::<Vec<u8>>("q", 4);
    phase.stage(StageSpec::new("writer", 1).writes(&out), |_| Ok(()));
    let sneaky = out;
    phase.stage(StageSpec::new("reader", 1).reads(&input), move |worker| {
        worker.send(&sneaky, vec![1])?;
        while worker.recv(&input)?.is_some() {}
        Ok(())
    });
    let (result, _) = run_within(phase.build().unwrap(), LIMIT);
    let error = result.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    let message = error.to_string();
    assert!(message.contains("stage 'reader' worker 0"), "{message}");
    assert!(message.contains("without declaring it"), "{message}");
}

#[test]
fn a_reader_that_returns_without_draining_fails_the_phase() {
    let mut phase = PhaseBuilder::new("undrained");
    let (out, input) = phase.queue::<Vec<u8>>("q", 16);
    phase.stage(StageSpec::new("writer", 1).writes(&out), move |worker| {
        for n in 0..8 {
            worker.send(&out, unit(n))?;
        }
        Ok(())
    });
    phase.stage(StageSpec::new("quitter", 1).reads(&input), move |worker| {
        worker.recv(&input)?;
        Ok(())
    });
    let (result, _) = run_within(phase.build().unwrap(), LIMIT);
    let error = result.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    // Either the quitter left units behind, or the writer found no reader.
    assert!(
        error.to_string().contains("a reader stage must drain its queues"),
        "{error}"
    );
}
