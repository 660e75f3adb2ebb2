//! Memory quotas and buffer pools under concurrency.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::run_within;
use spillway_core::ErrorKind;
use spillway_pipeline::{Allocation, BufferPool, MemoryQuota, PhaseBuilder, PooledBuffer, StageSpec};

const LIMIT: Duration = Duration::from_secs(10);

#[test]
fn concurrent_allocations_never_exceed_the_quota() {
    const QUOTA: u64 = 1_000;
    let quota = MemoryQuota::new("sorter", QUOTA);
    let in_use = Arc::new(AtomicU64::new(0));
    let in_use_max = Arc::new(AtomicU64::new(0));
    let mut phase = PhaseBuilder::new("quota");
    let (stage_quota, stage_in_use, stage_max) =
        (quota.clone(), Arc::clone(&in_use), Arc::clone(&in_use_max));
    phase.stage(StageSpec::new("allocators", 4), move |worker| {
        // A small deterministic generator per worker.
        let mut state = worker.index() as u64 * 7919 + 1;
        for _ in 0..300 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let bytes = 1 + (state >> 33) % 400;
            let allocation = worker.allocate(&stage_quota, bytes)?;
            assert_eq!(allocation.bytes(), bytes);
            // Counted after the grant and uncounted before the release: never
            // more than the quota really has out.
            let now = stage_in_use.fetch_add(bytes, Ordering::SeqCst) + bytes;
            stage_max.fetch_max(now, Ordering::SeqCst);
            thread::yield_now();
            stage_in_use.fetch_sub(bytes, Ordering::SeqCst);
            drop(allocation);
        }
        Ok(())
    });
    let (result, _) = run_within(phase.build().unwrap(), LIMIT);
    let report = result.unwrap();
    assert!(
        in_use_max.load(Ordering::SeqCst) <= QUOTA,
        "{}",
        in_use_max.load(Ordering::SeqCst)
    );
    assert!(quota.peak_bytes() <= QUOTA);
    assert!(quota.peak_bytes() > 400, "the workers should have overlapped");
    assert_eq!(quota.used_bytes(), 0, "every allocation went back");
    assert_eq!(quota.available(), QUOTA);
    // 4 workers asking up to 400 of 1000 bytes each must sometimes wait.
    println!("{report}");
}

#[test]
fn a_request_larger_than_the_quota_fails_at_once() {
    let quota = MemoryQuota::new("tiny", 100);
    let error = quota.try_allocate(101).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::ResourcesExhausted);
    assert!(error.to_string().contains("quota 'tiny'"), "{error}");

    let mut phase = PhaseBuilder::new("too-large");
    phase.stage(StageSpec::new("greedy", 1), move |worker| {
        worker.allocate(&quota, 101)?;
        Ok(())
    });
    let (result, elapsed) = run_within(phase.build().unwrap(), LIMIT);
    let error = result.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::ResourcesExhausted);
    let message = error.to_string();
    assert!(message.contains("stage 'greedy' worker 0"), "{message}");
    assert!(
        message.contains("101 bytes requested from memory quota 'tiny' of only 100 bytes"),
        "{message}"
    );
    assert!(
        elapsed < Duration::from_secs(1),
        "it must not wait for the deadlock detector"
    );
}

#[test]
fn allocations_travel_with_units_and_return_when_the_consumer_drops_them() {
    let quota = MemoryQuota::new("edge", 4 * 1024);
    let mut phase = PhaseBuilder::new("charged");
    let (out, input) = phase.queue::<(Vec<u8>, Allocation)>("charged", 64);
    let producer_quota = quota.clone();
    phase.stage(StageSpec::new("producer", 2).writes(&out), move |worker| {
        for _ in 0..100 {
            let mut allocation = worker.allocate(&producer_quota, 1024)?;
            // Used less than reserved: give the rest back early.
            allocation.shrink_to(512);
            worker.send(&out, (vec![0u8; 512], allocation))?;
        }
        Ok(())
    });
    phase.stage(StageSpec::new("consumer", 1).reads(&input), move |worker| {
        while let Some((data, mut allocation)) = worker.recv(&input)? {
            assert_eq!(allocation.bytes(), 512);
            let half = allocation.split_off(256);
            assert_eq!((half.bytes(), allocation.bytes()), (256, 256));
            assert_eq!(half.quota_name(), "edge");
            thread::sleep(Duration::from_micros(50));
            drop((data, half, allocation));
        }
        Ok(())
    });
    let (result, _) = run_within(phase.build().unwrap(), LIMIT);
    let report = result.unwrap();
    assert_eq!(quota.used_bytes(), 0);
    assert!(quota.peak_bytes() <= 4 * 1024);
    assert_eq!(report.stage("consumer").unwrap().bytes_in, 200 * 512);
    // At most 8 units of 512 bytes fit; the queue holds 64: the producers
    // must have waited for memory, not for room.
    assert!(
        report.stage("producer").unwrap().blocked_memory > Duration::ZERO,
        "{report}"
    );
}

#[test]
fn pooled_buffers_are_reused_and_a_short_pool_blocks_on_memory() {
    let pool = BufferPool::new("writer-buffers", 3, 4096);
    let mut phase = PhaseBuilder::new("pooled");
    let (out, input) = phase.queue::<PooledBuffer>("filled", 16);
    let producer_pool = pool.clone();
    phase.stage(StageSpec::new("filler", 1).writes(&out), move |worker| {
        for n in 0..30u8 {
            let mut buffer = worker.take(&producer_pool)?;
            assert!(buffer.is_empty(), "a returned buffer is cleared");
            assert!(buffer.capacity() >= 4096);
            buffer.extend_from_slice(&[n; 100]);
            worker.send(&out, buffer)?;
        }
        Ok(())
    });
    phase.stage(StageSpec::new("drainer", 1).reads(&input), move |worker| {
        let mut expected = 0u8;
        while let Some(buffer) = worker.recv(&input)? {
            assert_eq!(buffer.len(), 100);
            assert!(buffer.iter().all(|&byte| byte == expected));
            expected += 1;
            thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    });
    let (result, _) = run_within(phase.build().unwrap(), LIMIT);
    let report = result.unwrap();
    assert_eq!(pool.taken_count(), 30);
    assert_eq!(pool.available(), 3);
    assert_eq!(report.stage("drainer").unwrap().bytes_in, 3000);
    assert!(
        report.stage("filler").unwrap().blocked_memory > Duration::ZERO,
        "{report}"
    );
    assert_eq!(
        report.stage("filler").unwrap().blocked_output,
        Duration::ZERO,
        "{report}"
    );
}
