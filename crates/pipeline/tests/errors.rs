//! The first error (or panic) wins, keeps its kind, names its stage and
//! worker, and wakes every other worker wherever it waits.

mod common;

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::{run_within, unit, value};
use spillway_core::{Error, ErrorKind};
use spillway_pipeline::{BufferPool, DiskScheduler, MemoryQuota, PhaseBuilder, StageSpec};

const LIMIT: Duration = Duration::from_secs(10);
const ENOSPC: i32 = 28;

#[test]
fn an_error_in_the_middle_stage_stops_the_phase_and_keeps_its_kind() {
    let mut phase = PhaseBuilder::new("failing");
    let (raw_out, raw_in) = phase.queue::<Vec<u8>>("raw", 4);
    let (cooked_out, cooked_in) = phase.queue::<Vec<u8>>("cooked", 4);
    let woken = Arc::new(Mutex::new(Vec::new()));

    let woken_source = Arc::clone(&woken);
    phase.stage(StageSpec::new("source", 2).writes(&raw_out), move |worker| {
        // Endless: only the cancellation can stop it.
        let mut n = 0;
        let outcome = loop {
            if let Err(error) = worker.send(&raw_out, unit(n)) {
                break error;
            }
            n += 1;
        };
        woken_source
            .lock()
            .unwrap()
            .push(format!("source {}", worker.index()));
        Err(outcome)
    });
    let woken_middle = Arc::clone(&woken);
    phase.stage(
        StageSpec::new("middle", 3).reads(&raw_in).writes(&cooked_out),
        move |worker| {
            let mut handled = 0;
            while let Some(raw) = worker.recv(&raw_in)? {
                handled += 1;
                if worker.index() == 1 && handled == 10 {
                    return Err(Error::io("writing run 7", io::Error::from_raw_os_error(ENOSPC)));
                }
                if let Err(error) = worker.send(&cooked_out, raw) {
                    woken_middle
                        .lock()
                        .unwrap()
                        .push(format!("middle {}", worker.index()));
                    return Err(error);
                }
            }
            Ok(())
        },
    );
    let woken_sink = Arc::clone(&woken);
    phase.stage(StageSpec::new("sink", 1).reads(&cooked_in), move |worker| {
        let outcome = loop {
            match worker.recv(&cooked_in) {
                Ok(Some(cooked)) => {
                    let _ = value(&cooked);
                    // Slow, so the middle stage is often blocked in send.
                    thread::sleep(Duration::from_micros(200));
                }
                Ok(None) => break Ok(()),
                Err(error) => break Err(error),
            }
        };
        woken_sink.lock().unwrap().push("sink 0".to_string());
        outcome
    });

    let (result, _) = run_within(phase.build().unwrap(), LIMIT);
    let error = result.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Io);
    assert_eq!(error.raw_os_error(), Some(ENOSPC));
    let message = error.to_string();
    assert!(
        message.starts_with("stage 'middle' worker 1: writing run 7: "),
        "{message}"
    );
    let woken = woken.lock().unwrap();
    assert!(woken.contains(&"source 0".to_string()), "{woken:?}");
    assert!(woken.contains(&"source 1".to_string()), "{woken:?}");
    assert!(woken.contains(&"sink 0".to_string()), "{woken:?}");
}

#[test]
fn a_panic_becomes_an_internal_error_naming_the_stage() {
    let mut phase = PhaseBuilder::new("panicking");
    let (out, input) = phase.queue::<Vec<u8>>("q", 2);
    phase.stage(StageSpec::new("source", 1).writes(&out), move |worker| loop {
        worker.send(&out, unit(1))?;
    });
    phase.stage(StageSpec::new("crasher", 2).reads(&input), move |worker| {
        let mut count = 0;
        while worker.recv(&input)?.is_some() {
            count += 1;
            if worker.index() == 0 && count == 5 {
                panic!("boom {count}");
            }
        }
        Ok(())
    });
    let (result, _) = run_within(phase.build().unwrap(), LIMIT);
    let error = result.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Internal);
    let message = error.to_string();
    assert!(
        message.contains("stage 'crasher' worker 0 panicked: boom 5"),
        "{message}"
    );
}

#[test]
fn cancellation_wakes_workers_waiting_for_memory_buffers_tokens_and_queues() {
    let quota = MemoryQuota::new("scarce", 100);
    let pool = BufferPool::new("one", 1, 64);
    let disks = DiskScheduler::new(2, 1);
    let held = quota.try_allocate(100).unwrap().unwrap();
    let pooled = pool.try_take().unwrap();
    let written = disks.try_write_token(0).unwrap().unwrap();

    let mut phase = PhaseBuilder::new("wake-up");
    let (out, input) = phase.queue::<Vec<u8>>("never", 1);
    let woken = Arc::new(AtomicUsize::new(0));
    let (w1, w2, w3, w4, w5) = (
        woken.clone(),
        woken.clone(),
        woken.clone(),
        woken.clone(),
        woken.clone(),
    );
    phase.stage(StageSpec::new("memory", 1), move |worker| {
        let error = worker.allocate(&quota, 1).unwrap_err();
        w1.fetch_add(1, Ordering::SeqCst);
        Err(error)
    });
    phase.stage(StageSpec::new("buffer", 1), move |worker| {
        let error = worker.take(&pool).unwrap_err();
        w2.fetch_add(1, Ordering::SeqCst);
        Err(error)
    });
    let read_disks = disks;
    phase.stage(StageSpec::new("disk", 2), move |worker| {
        let error = if worker.index() == 0 {
            worker.read_token(&read_disks, 0).unwrap_err()
        } else {
            worker.write_token(&read_disks, 0).unwrap_err()
        };
        w3.fetch_add(1, Ordering::SeqCst);
        Err(error)
    });
    phase.stage(StageSpec::new("reader", 1).reads(&input), move |worker| {
        let error = worker.recv(&input).unwrap_err();
        w4.fetch_add(1, Ordering::SeqCst);
        Err(error)
    });
    // Holds the producer without sending, so the reader waits on an empty queue.
    phase.stage(StageSpec::new("failer", 1).writes(&out), move |_worker| {
        let _never_used = &out;
        thread::sleep(Duration::from_millis(100));
        w5.fetch_add(1, Ordering::SeqCst);
        Err(Error::Corruption {
            file: "/runs/3".into(),
            offset: 4096,
            what: "bad block".into(),
        })
    });
    let (result, elapsed) = run_within(phase.build().unwrap(), LIMIT);
    let error = result.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corruption);
    assert!(
        error.to_string().contains("stage 'failer' worker 0: bad block"),
        "{error}"
    );
    assert_eq!(woken.load(Ordering::SeqCst), 6);
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    drop((held, pooled, written));
}

#[test]
fn a_raised_interrupt_stops_an_endless_phase_with_interrupted() {
    let mut phase = PhaseBuilder::new("endless");
    let (out, input) = phase.queue::<Vec<u8>>("numbers", 4);
    phase.stage(StageSpec::new("source", 1).writes(&out), move |worker| {
        let mut n = 0;
        loop {
            worker.send(&out, unit(n))?;
            n += 1;
        }
    });
    phase.stage(StageSpec::new("sink", 1).reads(&input), move |worker| {
        while let Some(number) = worker.recv(&input)? {
            let _ = value(&number);
            thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    });
    let mut phase = phase.build().unwrap();
    let interrupt = spillway_core::Interrupt::new();
    phase.set_interrupt(interrupt.clone());
    let raiser = thread::spawn(move || {
        thread::sleep(Duration::from_millis(100));
        interrupt.raise();
    });
    let started = std::time::Instant::now();
    let (result, _) = run_within(phase, LIMIT);
    raiser.join().unwrap();
    let error = result.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Interrupted, "{error}");
    assert!(
        started.elapsed() < LIMIT,
        "stopped by the interrupt, not the time limit"
    );
}

#[test]
fn a_phase_that_ends_with_its_interrupt_raised_is_interrupted() {
    let interrupt = spillway_core::Interrupt::new();
    let mut phase = PhaseBuilder::new("quick");
    let raiser = interrupt.clone();
    phase.stage(StageSpec::new("only", 1), move |_worker| {
        // Done long before the monitor's next look.
        raiser.raise();
        Ok(())
    });
    let mut phase = phase.build().unwrap();
    phase.set_interrupt(interrupt);
    let (result, _) = run_within(phase, LIMIT);
    assert_eq!(result.unwrap_err().kind(), ErrorKind::Interrupted);
}
