//! The persistence modes: what each does and counts, and the trace the
//! crash tester reads.

use std::time::{Duration, Instant};

use spillway_pmem::region::MIN_SIZE;
use spillway_pmem::{Event, FenceOnly, FlushKind, Hardware, Latency, Persist, Region, Tracing, Volatile};

fn region() -> Region {
    Region::in_memory(MIN_SIZE, "test").unwrap()
}

fn modes() -> Vec<Box<dyn Persist>> {
    vec![
        Box::new(Hardware::detect()),
        Box::new(Hardware::with(FlushKind::Clflush)),
        Box::new(FenceOnly::default()),
        Box::new(Volatile::default()),
        Box::new(Tracing::default()),
        Box::new(Latency::new(Volatile::default(), Duration::from_nanos(300))),
    ]
}

#[test]
fn every_mode_stores_and_counts_lines_flushed_and_fences() {
    let region = region();
    let modes = modes();
    for (i, persist) in modes.iter().enumerate() {
        let at = 64 * (4 + 4 * i as u64);
        persist.store(&region, at + 56, 0x0123_4567_89ab_cdef);
        persist.copy(&region, at + 64, b"twelve bytes");
        // Bytes 56..76 of the object touch two lines; an empty range none.
        persist.flush(&region, at + 56, 20);
        persist.flush(&region, at, 0);
        persist.fence();
        assert_eq!(
            region.word(at + 56).load(std::sync::atomic::Ordering::Acquire),
            0x0123_4567_89ab_cdef
        );
        assert_eq!(region.bytes(at + 64, 12), b"twelve bytes");
        let name = persist.name();
        assert_eq!(
            (persist.counts().flushes(), persist.counts().fences()),
            (2, 1),
            "{name}"
        );
        persist.persist_word(&region, at, 7);
        assert_eq!(
            (persist.counts().flushes(), persist.counts().fences()),
            (3, 2),
            "{name}"
        );
    }
    assert_eq!(modes[5].name(), "latency:300ns");
    assert_eq!(modes[2].name(), "fence");
    assert!(["clwb", "clflushopt", "clflush"].contains(&modes[0].name().as_str()));
}

/// Whole lines written and flushed at once (a new segment's): the bytes
/// land, the lines between stay as they were, and each line counts as one
/// flush, in every mode (`Hardware` streams them past the cache).
#[test]
fn every_mode_writes_whole_lines_flushed_and_counts_each() {
    for persist in modes() {
        let region = region();
        let mut first = [0u8; 64];
        first[..5].copy_from_slice(b"first");
        let second = [7u8; 64];
        persist.write_lines(&region, 1024, &[(0, first), (128, second)]);
        persist.fence();
        let name = persist.name();
        assert_eq!(region.bytes(1024, 64), first, "{name}");
        assert_eq!(region.bytes(1088, 64), [0; 64], "{name}");
        assert_eq!(region.bytes(1152, 64), second, "{name}");
        assert_eq!(
            (persist.counts().flushes(), persist.counts().fences()),
            (2, 1),
            "{name}"
        );
    }
    // The crash tester sees each line copied, then flushed.
    let region = region();
    let trace = Tracing::default();
    trace.write_lines(&region, 512, &[(64, [1; 64])]);
    assert_eq!(
        trace.take(),
        [
            Event::Store {
                at: 576,
                bytes: vec![1; 64]
            },
            Event::Flush { line: 9 }
        ]
    );
}

#[test]
fn the_latency_mode_waits_per_line_flushed() {
    let region = region();
    let persist = Latency::new(FenceOnly::default(), Duration::from_micros(200));
    let started = Instant::now();
    persist.flush(&region, 0, 3 * 64);
    assert!(
        started.elapsed() >= Duration::from_micros(600),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn the_trace_holds_every_store_flush_and_fence_in_program_order() {
    let region = region();
    let trace = Tracing::default();
    trace.begin("insert");
    trace.store(&region, 128, 5);
    trace.copy(&region, 192, b"ab");
    trace.flush(&region, 128, 80);
    trace.fence();
    trace.end();
    assert_eq!(
        trace.take(),
        vec![
            Event::Begin { operation: "insert" },
            Event::Store {
                at: 128,
                bytes: 5u64.to_le_bytes().to_vec()
            },
            Event::Store {
                at: 192,
                bytes: b"ab".to_vec()
            },
            Event::Flush { line: 2 },
            Event::Flush { line: 3 },
            Event::Fence,
            Event::End,
        ]
    );
    assert!(trace.take().is_empty(), "taken once");
}

#[test]
fn two_threads_store_and_flush_through_one_mode() {
    let region = region();
    let persist = Hardware::detect();
    std::thread::scope(|scope| {
        for thread in 0..2u64 {
            let (region, persist) = (&region, &persist);
            scope.spawn(move || {
                for i in 0..100u64 {
                    persist.persist_word(region, 64 + 8 * (2 * i + thread), i * 2 + thread);
                }
            });
        }
    });
    for i in 0..200u64 {
        assert_eq!(
            region.word(64 + 8 * i).load(std::sync::atomic::Ordering::Acquire),
            i
        );
    }
    assert_eq!(
        (persist.counts().flushes(), persist.counts().fences()),
        (200, 200)
    );
}
