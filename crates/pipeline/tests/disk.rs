//! The disk scheduler: write tokens cap concurrent writes per disk, and with
//! several disks no disk is read and written at once.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::run_within;
use spillway_pipeline::{DiskScheduler, PhaseBuilder, StageSpec};

const LIMIT: Duration = Duration::from_secs(10);

#[test]
fn write_tokens_cap_concurrent_writes_per_disk() {
    const TOKENS: usize = 2;
    let disks = DiskScheduler::new(1, TOKENS);
    let holders = Arc::new(AtomicUsize::new(0));
    let holders_max = Arc::new(AtomicUsize::new(0));
    let mut phase = PhaseBuilder::new("writers");
    let (stage_disks, stage_holders, stage_max) = (disks.clone(), holders, holders_max.clone());
    phase.stage(StageSpec::new("writer", 6), move |worker| {
        for _ in 0..20 {
            let token = worker.write_token(&stage_disks, 0)?;
            assert_eq!(token.disk(), 0);
            let now = stage_holders.fetch_add(1, Ordering::SeqCst) + 1;
            stage_max.fetch_max(now, Ordering::SeqCst);
            thread::sleep(Duration::from_micros(200));
            stage_holders.fetch_sub(1, Ordering::SeqCst);
            drop(token);
        }
        Ok(())
    });
    let (result, _) = run_within(phase.build().unwrap(), LIMIT);
    let report = result.unwrap();
    let max = holders_max.load(Ordering::SeqCst);
    assert!((1..=TOKENS).contains(&max), "{max} concurrent writers");
    assert_eq!(disks.writes_in_flight(0), 0);
    // Six writers for two tokens: waiting for a token is blocked on output.
    assert!(
        report.stage("writer").unwrap().blocked_output > Duration::ZERO,
        "{report}"
    );
}

#[test]
fn with_two_disks_reads_and_writes_of_one_disk_never_overlap() {
    const DISKS: usize = 2;
    let disks = DiskScheduler::new(DISKS, 2);
    let reads: Arc<[AtomicUsize; DISKS]> = Arc::new(Default::default());
    let writes: Arc<[AtomicUsize; DISKS]> = Arc::new(Default::default());
    let overlap = Arc::new(AtomicBool::new(false));
    let mut phase = PhaseBuilder::new("mixed");
    {
        let (disks, reads, writes, overlap) = (disks.clone(), reads.clone(), writes.clone(), overlap.clone());
        phase.stage(StageSpec::new("reader", 4), move |worker| {
            for round in 0..30 {
                let disk = (worker.index() + round) % DISKS;
                let token = worker.read_token(&disks, disk)?;
                reads[disk].fetch_add(1, Ordering::SeqCst);
                if writes[disk].load(Ordering::SeqCst) > 0 {
                    overlap.store(true, Ordering::SeqCst);
                }
                thread::sleep(Duration::from_micros(100));
                reads[disk].fetch_sub(1, Ordering::SeqCst);
                drop(token);
            }
            Ok(())
        });
    }
    {
        let (disks, overlap) = (disks.clone(), overlap.clone());
        phase.stage(StageSpec::new("writer", 4), move |worker| {
            for round in 0..30 {
                let disk = (worker.index() + round) % DISKS;
                let token = worker.write_token(&disks, disk)?;
                writes[disk].fetch_add(1, Ordering::SeqCst);
                if reads[disk].load(Ordering::SeqCst) > 0 {
                    overlap.store(true, Ordering::SeqCst);
                }
                thread::sleep(Duration::from_micros(100));
                writes[disk].fetch_sub(1, Ordering::SeqCst);
                drop(token);
            }
            Ok(())
        });
    }
    let (result, _) = run_within(phase.build().unwrap(), LIMIT);
    result.unwrap();
    assert!(
        !overlap.load(Ordering::SeqCst),
        "a disk was read and written at once"
    );
    for disk in 0..DISKS {
        assert_eq!(
            (disks.reads_in_flight(disk), disks.writes_in_flight(disk)),
            (0, 0)
        );
    }
}

#[test]
fn token_rules_outside_a_phase() {
    // One disk: it must read and write at once.
    let single = DiskScheduler::new(1, 1);
    let write = single.try_write_token(0).unwrap().unwrap();
    assert!(single.try_write_token(0).unwrap().is_none(), "one write token");
    let read = single.try_read_token(0).unwrap().unwrap();
    drop((write, read));

    // Two disks: a disk being written is not read, and the other way round;
    // the other disk is independent.
    let pair = DiskScheduler::new(2, 2);
    let write = pair.try_write_token(0).unwrap().unwrap();
    assert!(pair.try_read_token(0).unwrap().is_none());
    let other = pair.try_read_token(1).unwrap().unwrap();
    assert!(pair.try_write_token(1).unwrap().is_none());
    drop(write);
    let read = pair.try_read_token(0).unwrap().unwrap();
    drop((other, read));

    let error = pair.try_write_token(2).unwrap_err();
    assert!(error.to_string().contains("disk 2 is out of range"), "{error}");
    assert!(DiskScheduler::new(1, 0).try_write_token(0).is_err());
}

#[test]
fn a_waiting_writer_is_not_starved_by_new_readers() {
    let disks = DiskScheduler::new(2, 1);
    let first_read = disks.try_read_token(0).unwrap().unwrap();
    let mut phase = PhaseBuilder::new("fair");
    let stage_disks = disks.clone();
    phase.stage(StageSpec::new("writer", 1), move |worker| {
        let token = worker.write_token(&stage_disks, 0)?;
        assert_eq!(token.disk(), 0);
        Ok(())
    });
    let phase = phase.build().unwrap();
    let runner = thread::spawn(move || phase.run());
    // New reads are granted until the writer is in line; from then on they
    // wait behind it, so the reads in flight drain and the writer goes next.
    let deadline = std::time::Instant::now() + LIMIT;
    while let Some(read) = disks.try_read_token(0).unwrap() {
        drop(read);
        assert!(
            std::time::Instant::now() < deadline,
            "the writer never got in line"
        );
        thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        disks.writes_in_flight(0),
        0,
        "the read in flight still blocks the write"
    );
    drop(first_read);
    let report = runner.join().unwrap().unwrap();
    assert!(report.stage("writer").unwrap().blocked_output > Duration::ZERO);
    assert!(disks.try_read_token(0).unwrap().is_some());
}
