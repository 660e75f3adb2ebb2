//! The store against a model: a plain list of every write, resolved
//! newest-wins by brute force.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use spillway_core::fs::{CrashMode, Fault, FaultTarget, OpKind, TearGranularity};
use spillway_core::{ErrorKind, Fs, SimFs};
use spillway_stream::{Aggregate, Batch, Bounds, Op, Options, Records, StreamIndex, TemplatePolicy};

/// xorshift64*: enough randomness for tests, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Every write in order; its position is its sequence number.
#[derive(Default, Clone)]
struct Model {
    writes: Vec<(Op, u64, u64, Vec<u8>)>,
}

impl Model {
    fn live(&self, bounds: &Bounds) -> Vec<(u64, u64, u64, Vec<u8>)> {
        let mut live = Vec::new();
        for (seq, (op, key, time, value)) in self.writes.iter().enumerate() {
            if *op == Op::Delete || !bounds.contains(*key, *time) {
                continue;
            }
            let replaced = self.writes[seq + 1..]
                .iter()
                .any(|(later, k, t, _)| later.shadows() && (k, t) == (key, time));
            if !replaced {
                live.push((*key, *time, seq as u64, value.clone()));
            }
        }
        live.sort();
        live
    }

    fn aggregate(&self, bounds: &Bounds) -> Aggregate {
        let mut aggregate = Aggregate::default();
        for (_, _, _, value) in self.live(bounds) {
            aggregate.add(&value);
        }
        aggregate
    }
}

fn rows(records: &Records) -> Vec<(u64, u64, u64, Vec<u8>)> {
    (0..records.len())
        .map(|i| {
            (
                records.keys[i],
                records.times[i],
                records.seqs[i],
                records.value(i).to_vec(),
            )
        })
        .collect()
}

fn small_options(template: TemplatePolicy) -> Options {
    Options {
        buffer_bytes: 4096,
        leaf_capacity: 4,
        fan_out: 4,
        template,
        value_bytes_max: 64,
        sync: true,
        ..Options::default()
    }
}

fn assert_close(got: &Aggregate, want: &Aggregate) {
    assert_eq!((got.count, got.numeric), (want.count, want.numeric));
    assert_eq!((got.min, got.max), (want.min, want.max));
    assert!(
        (got.sum() - want.sum()).abs() <= 1e-6 * want.sum().abs().max(1.0),
        "{got:?} vs {want:?}"
    );
}

fn random_bounds(rng: &mut Rng, key_space: u64) -> Bounds {
    let low = rng.below(key_space + 2);
    let high = low + rng.below(key_space / 3 + 1);
    let bounds = Bounds::keys(low, high);
    if rng.below(2) == 0 {
        let time_low = rng.below(400);
        bounds.times(time_low, time_low + rng.below(300))
    } else {
        bounds
    }
}

fn check_queries(index: &StreamIndex, model: &Model, rng: &mut Rng, key_space: u64, queries: usize) {
    // One result reused by every query, as a caller of `range_into` does:
    // each query replaces what the last left in it.
    let mut reused = Records::default();
    for _ in 0..queries {
        let bounds = random_bounds(rng, key_space);
        let live = model.live(&bounds);
        assert_eq!(rows(&index.range(bounds).unwrap()), live, "range {bounds:?}");
        index.range_into(bounds, &mut reused).unwrap();
        assert_eq!(rows(&reused), live, "range {bounds:?} into a reused result");
        assert_close(&index.aggregate(bounds).unwrap(), &model.aggregate(&bounds));
    }
    let key = rng.below(key_space);
    assert_eq!(
        rows(&index.get(key).unwrap()),
        model.live(&Bounds::keys(key, key))
    );
    let all = Bounds::keys(0, u64::MAX);
    assert_eq!(rows(&index.range(all).unwrap()), model.live(&all));
    assert_close(&index.aggregate(all).unwrap(), &model.aggregate(&all));
}

fn random_batch(rng: &mut Rng, key_space: u64, time: &mut u64, model: &mut Model) -> Batch {
    random_batch_of(rng, key_space, time, model, Values::Mixed)
}

/// The values a random batch writes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Values {
    /// Numbers (8 bytes) and strings of up to 19 bytes.
    Mixed,
    /// Numbers only: every value of the store has one width, which
    /// queries copy as words.
    Numbers,
}

fn random_batch_of(
    rng: &mut Rng,
    key_space: u64,
    time: &mut u64,
    model: &mut Model,
    values: Values,
) -> Batch {
    let mut batch = Batch::new();
    for _ in 0..1 + rng.below(20) {
        let key = rng.below(key_space);
        *time += rng.below(3);
        // Times a little out of order, and repeats of recent ones, so
        // updates and deletes find their records.
        let at = time.saturating_sub(rng.below(5));
        let value = match rng.below(3) {
            0 => (rng.below(1000) as f64 - 300.0).to_le_bytes().to_vec(),
            1 if values == Values::Mixed => vec![b'x'; rng.below(20) as usize],
            _ => (key as f64).to_le_bytes().to_vec(),
        };
        let op = match rng.below(10) {
            0 => Op::Update,
            1 => Op::Delete,
            _ => Op::Append,
        };
        let value = if op == Op::Delete { Vec::new() } else { value };
        batch.push(op, key, at, &value);
        model.writes.push((op, key, at, value));
    }
    batch
}

#[test]
fn the_store_answers_as_the_model_through_flushes_rebuilds_compactions_and_reopens() {
    for (template, values) in [
        (TemplatePolicy::None, Values::Mixed),
        (TemplatePolicy::Fixed, Values::Mixed),
        (TemplatePolicy::Rebuild { threshold: 0.05 }, Values::Mixed),
        (TemplatePolicy::Rebuild { threshold: 0.05 }, Values::Numbers),
    ] {
        let fs = Arc::new(SimFs::new());
        let dir = Path::new("/stream");
        let options = small_options(template);
        let mut index = StreamIndex::open_on(fs.clone(), dir, options.clone()).unwrap();
        let mut model = Model::default();
        let mut rng = Rng(0x5eed ^ template_code(template) ^ (values as u64) << 8);
        let mut time = 0;
        let key_space = 500;
        let (mut flushes, mut templates, mut overflowed, mut compacted) = (0, 0, 0, 0);
        let mut tier_merges = 0;
        for round in 0..400 {
            let batch = random_batch_of(&mut rng, key_space, &mut time, &mut model, values);
            index.write(&batch).unwrap();
            if round % 25 == 0 {
                // Queries while tiers are being merged, or once they are.
                if rng.below(2) == 0 {
                    index.settle();
                }
                check_queries(&index, &model, &mut rng, key_space, 10);
            }
            if rng.below(3) == 0 {
                // A small segment, for compaction to merge.
                index.flush().unwrap();
            }
            if round % 97 == 0 {
                compacted += index.compact().unwrap();
            }
            if round % 131 == 130 {
                index.settle();
                let stats = index.stats();
                (flushes, templates, overflowed, tier_merges) = (
                    flushes + stats.flushes,
                    templates + stats.templates,
                    overflowed + stats.total_overflow.overflowed_leaves(),
                    tier_merges + stats.tier_merges,
                );
                // Closed before it is opened again: two stores open on
                // one directory would write each other's files (the
                // real file system's lock keeps them apart).
                drop(index);
                index = StreamIndex::open_on(fs.clone(), dir, options.clone()).unwrap();
            }
        }
        index.settle();
        check_queries(&index, &model, &mut rng, key_space, 30);
        let stats = index.stats();
        assert!(flushes + stats.flushes >= 50, "{stats:?}");
        assert!(
            tier_merges + stats.tier_merges >= 20,
            "tier merges: {tier_merges}, {stats:?}"
        );
        compacted += index.compact().unwrap();
        assert!(compacted >= 10, "{compacted}");
        if template != TemplatePolicy::None {
            assert!(
                templates + stats.templates >= 3,
                "templates made: {templates}, {stats:?}"
            );
            assert!(
                overflowed + stats.total_overflow.overflowed_leaves() > 0,
                "{stats:?}"
            );
        }
        check_queries(&index, &model, &mut rng, key_space, 30);
        let report = index.verify().unwrap();
        assert_eq!(report.segments, index.stats().segments);
        index.close().unwrap();
        let index = StreamIndex::open_on(fs.clone(), dir, options).unwrap();
        check_queries(&index, &model, &mut rng, key_space, 10);
    }
}

fn template_code(template: TemplatePolicy) -> u64 {
    match template {
        TemplatePolicy::None => 1,
        TemplatePolicy::Fixed => 2,
        TemplatePolicy::Rebuild { .. } => 3,
    }
}

#[test]
fn aggregates_come_from_leaf_summaries_unless_a_later_write_replaced_records_in_the_leaf() {
    let fs = Arc::new(SimFs::new());
    let options = Options {
        cache_bytes: 0,
        ..small_options(TemplatePolicy::Fixed)
    };
    let index = StreamIndex::open_on(fs, Path::new("/s"), options).unwrap();
    let mut batch = Batch::new();
    for key in 0..200u64 {
        batch.append(key, key, &(key as f64).to_le_bytes());
    }
    index.write(&batch).unwrap();
    index.flush().unwrap();
    let all = Bounds::keys(0, u64::MAX);
    let before = index.stats();
    let aggregate = index.aggregate(all).unwrap();
    assert_eq!(aggregate.count, 200);
    assert_eq!(aggregate.sum(), (0..200).sum::<u64>() as f64);
    let after = index.stats();
    assert_eq!(after.leaves_read, before.leaves_read, "every leaf is summarized");
    assert_eq!(after.leaves_summarized - before.leaves_summarized, 50);

    index.update(10, 10, &1000.0f64.to_le_bytes()).unwrap();
    index.delete(150, 150).unwrap();
    let aggregate = index.aggregate(all).unwrap();
    assert_eq!(aggregate.count, 199);
    assert_eq!(
        aggregate.sum(),
        (0..200).sum::<u64>() as f64 - 10.0 - 150.0 + 1000.0
    );
    assert_eq!(aggregate.max, 1000.0);
    let read = index.stats().leaves_read - after.leaves_read;
    assert_eq!(
        read, 2,
        "only the two leaves that the update and delete touch are read"
    );
}

#[test]
fn concurrent_writers_and_readers_see_every_acknowledged_write() {
    let fs = Arc::new(SimFs::new());
    let options = Options {
        buffer_bytes: 64 << 10,
        sync: false,
        ..small_options(TemplatePolicy::Rebuild { threshold: 0.02 })
    };
    let index = StreamIndex::open_on(fs, Path::new("/c"), options).unwrap();
    const WRITERS: u64 = 3;
    const BATCHES: u64 = 1000;
    // acknowledged[w] = batches writer w has had acknowledged.
    let acknowledged: Vec<AtomicU64> = (0..WRITERS).map(|_| AtomicU64::new(0)).collect();
    std::thread::scope(|scope| {
        for writer in 0..WRITERS {
            let (index, acknowledged) = (&index, &acknowledged);
            scope.spawn(move || {
                let mut rng = Rng(writer + 1);
                for number in 0..BATCHES {
                    let mut batch = Batch::new();
                    for i in 0..10u64 {
                        // Key spreads writers over the key space; the time
                        // says who wrote it: writer, batch, record.
                        let key = rng.below(10_000);
                        batch.append(key, (writer << 32) | (number << 8) | i, &1.0f64.to_le_bytes());
                    }
                    index.write(&batch).unwrap();
                    acknowledged[writer as usize].store(number + 1, Ordering::SeqCst);
                }
            });
        }
        scope.spawn(|| {
            let mut rng = Rng(99);
            loop {
                let floor: Vec<u64> = acknowledged.iter().map(|a| a.load(Ordering::SeqCst)).collect();
                let records = index.range(Bounds::keys(0, u64::MAX)).unwrap();
                let mut seen = vec![vec![0u32; BATCHES as usize]; WRITERS as usize];
                for &time in &records.times {
                    seen[(time >> 32) as usize][((time >> 8) & 0xff_ffff) as usize] += 1;
                }
                for (writer, batches) in seen.iter().enumerate() {
                    for (number, &count) in batches.iter().enumerate() {
                        // A batch is seen whole or not at all, and whole
                        // if it was acknowledged before the query.
                        assert!(count == 0 || count == 10, "batch seen in part: {count}");
                        assert!(
                            number as u64 >= floor[writer] || count == 10,
                            "acknowledged batch missed"
                        );
                    }
                }
                let low = rng.below(10_000);
                let aggregate = index.aggregate(Bounds::keys(low, low + 2_000)).unwrap();
                assert_eq!(aggregate.count, aggregate.numeric);
                if floor.iter().all(|&f| f == BATCHES) {
                    break;
                }
            }
        });
    });
    let stats = index.stats();
    assert_eq!(stats.writes, WRITERS * BATCHES * 10);
    assert_eq!(
        index.aggregate(Bounds::keys(0, u64::MAX)).unwrap().count,
        WRITERS * BATCHES * 10
    );
    // Against the oracle: every writer's records, regenerated, sorted.
    let mut oracle: Vec<(u64, u64)> = Vec::new();
    for writer in 0..WRITERS {
        let mut rng = Rng(writer + 1);
        for number in 0..BATCHES {
            for i in 0..10u64 {
                oracle.push((rng.below(10_000), (writer << 32) | (number << 8) | i));
            }
        }
    }
    oracle.sort_unstable();
    let pairs = |records: &Records| -> Vec<(u64, u64)> {
        records
            .keys
            .iter()
            .copied()
            .zip(records.times.iter().copied())
            .collect()
    };
    assert_eq!(pairs(&index.range(Bounds::keys(0, u64::MAX)).unwrap()), oracle);
    let want: Vec<(u64, u64)> = oracle
        .iter()
        .copied()
        .filter(|&(key, _)| (2_500..=3_499).contains(&key))
        .collect();
    assert_eq!(pairs(&index.range(Bounds::keys(2_500, 3_499)).unwrap()), want);
    assert!(stats.flushes > 3, "{stats:?}");
}

#[test]
fn a_drifting_stream_overflows_a_fixed_template_and_one_rebuilt_within_buffers_stays_under_the_threshold() {
    let share = |template| {
        let fs = Arc::new(SimFs::new());
        let options = Options {
            buffer_bytes: 256 << 10,
            leaf_capacity: 16,
            fan_out: 16,
            template,
            sync: false,
            value_bytes_max: 1024,
            ..Options::default()
        };
        let index = StreamIndex::open_on(fs, Path::new("/d"), options).unwrap();
        let mut rng = Rng(7);
        for step in 0..60u64 {
            let mut batch = Batch::new();
            for i in 0..1000u64 {
                // Keys drift upward: each batch's window starts higher.
                let key = step * 4_000 + rng.below(100_000);
                batch.append(key, step * 1000 + i, &[]);
            }
            index.write(&batch).unwrap();
        }
        index.flush().unwrap();
        assert_eq!(index.range(Bounds::keys(0, u64::MAX)).unwrap().len(), 60_000);
        let stats = index.stats();
        let overflow = stats.total_overflow;
        (
            overflow.overflowed_share(),
            overflow.overflow_entries as f64 / overflow.entries as f64,
            stats.templates as f64 / stats.flushes as f64,
        )
    };
    let (fixed_leaves, fixed_entries, fixed_templates) = share(TemplatePolicy::Fixed);
    let (rebuilt_leaves, rebuilt_entries, rebuilt_templates) =
        share(TemplatePolicy::Rebuild { threshold: 0.05 });
    assert!(fixed_templates < 0.5, "the fixed template is made once");
    // More than one template per buffer: rebuilt within buffers too.
    assert!(
        rebuilt_templates > 1.0,
        "{rebuilt_templates} templates per buffer"
    );
    // The fixed template sends the drifted keys to its last leaf: few
    // leaves overflow, but most entries sit in one long chain.
    assert!(
        fixed_entries > 0.5,
        "fixed: {fixed_entries} of entries in overflow nodes"
    );
    // Rebuilt as soon as it passes the threshold: under it at every flush.
    assert!(
        rebuilt_entries < 0.05,
        "rebuilt: {rebuilt_entries} of entries in overflow nodes"
    );
    assert!(
        rebuilt_leaves < 0.05,
        "rebuilt: {rebuilt_leaves} of leaves overflowed (fixed {fixed_leaves})"
    );
}

#[test]
fn bad_input_gets_a_clear_error_and_changes_nothing() {
    let fs = Arc::new(SimFs::new());
    let options = Options {
        ordered_time: true,
        ..small_options(TemplatePolicy::Fixed)
    };
    let index = StreamIndex::open_on(fs.clone(), Path::new("/b"), options.clone()).unwrap();
    index.append(1, 100, b"ok").unwrap();
    let error = index.append(2, 99, b"late").unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    assert!(error.to_string().contains("time 99"), "{error}");
    let error = index.append(3, 101, &[0; 65]).unwrap_err();
    assert!(error.to_string().contains("65 bytes"), "{error}");
    let mut batch = Batch::new();
    batch.append(4, 200, b"fine");
    batch.append(5, 150, b"late");
    assert!(index.write(&batch).is_err());
    assert_eq!(
        index.range(Bounds::keys(0, u64::MAX)).unwrap().len(),
        1,
        "a refused batch writes nothing"
    );
    assert!(spillway_stream::key::encode_f64(f64::NAN).is_err());

    for (bad, name) in [
        (
            Options {
                leaf_capacity: 1,
                ..options.clone()
            },
            "leaf_capacity",
        ),
        (
            Options {
                fill: 0.0,
                ..options.clone()
            },
            "fill",
        ),
        (
            Options {
                template: TemplatePolicy::Rebuild { threshold: 2.0 },
                ..options
            },
            "threshold",
        ),
    ] {
        let error = StreamIndex::open_on(fs.clone(), Path::new("/b2"), bad).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument);
        assert!(error.to_string().contains(name), "{error}");
    }
}

#[test]
fn a_crash_at_any_point_keeps_every_acknowledged_write_and_no_half_segment() {
    for seed in 0..40u64 {
        let fs = Arc::new(SimFs::new());
        let dir = Path::new("/crash");
        let options = small_options(TemplatePolicy::Rebuild { threshold: 0.05 });
        let index = StreamIndex::open_on(fs.clone(), dir, options.clone()).unwrap();
        let mut rng = Rng(seed + 1);
        let mut acknowledged = Model::default();
        let mut time = 0;
        // A fault at a random later operation stops the writer mid-way
        // (mid-log-write, mid-flush, mid-manifest, ...).
        fs.fail_after(
            50 + rng.below(400),
            Fault::for_good(libc::EIO).on(FaultTarget::Mutations),
        );
        let failed = loop {
            let mut attempted = acknowledged.clone();
            let batch = random_batch(&mut rng, 300, &mut time, &mut attempted);
            if index.write(&batch).is_err() {
                break attempted;
            }
            acknowledged = attempted;
        };
        assert!(
            index.append(1, 1, b"after").is_err(),
            "a failed store stays failed"
        );
        drop(index);
        fs.clear_fault();
        let mode = if seed % 2 == 0 {
            CrashMode::DropUnsynced
        } else {
            CrashMode::TearUnsynced {
                seed,
                granularity: TearGranularity::Byte,
            }
        };
        fs.crash(mode);
        let index = StreamIndex::open_on(fs.clone(), dir, options.clone()).unwrap();
        let all = Bounds::keys(0, u64::MAX);
        let got = rows(&index.range(all).unwrap());
        // Every acknowledged write, and the failed batch whole or not at all.
        assert!(
            got == acknowledged.live(&all) || got == failed.live(&all),
            "seed {seed}: recovered {} records, acknowledged {}",
            got.len(),
            acknowledged.live(&all).len()
        );
        index.verify().unwrap();
        // No segment file the manifest does not list survives recovery.
        let names = fs.list_dir(dir).unwrap();
        assert_eq!(
            names.iter().filter(|name| name.ends_with(".seg")).count() as u64,
            index.stats().segments,
            "seed {seed}: {names:?}"
        );
    }
}

#[test]
fn a_corrupted_segment_is_reported_with_its_file() {
    let fs = Arc::new(SimFs::new());
    let dir = Path::new("/corrupt");
    let options = Options {
        cache_bytes: 0,
        ..small_options(TemplatePolicy::Fixed)
    };
    let index = StreamIndex::open_on(fs.clone(), dir, options.clone()).unwrap();
    let mut batch = Batch::new();
    for key in 0..100u64 {
        batch.append(key, key, &(key as f64).to_le_bytes());
    }
    index.write(&batch).unwrap();
    index.close().unwrap();
    let segment = fs
        .list_dir(dir)
        .unwrap()
        .into_iter()
        .find(|name| name.ends_with(".seg"))
        .unwrap();
    let path = dir.join(&segment);
    let file = fs.open_read_write(&path).unwrap();
    // A flipped bit in a record, then in the index.
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, 30).unwrap();
    file.write_at(&[byte[0] ^ 0x10], 30).unwrap();
    let index = StreamIndex::open_on(fs.clone(), dir, options.clone()).unwrap();
    let error = index.range(Bounds::keys(0, 3)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corruption);
    assert!(error.to_string().contains(&segment), "{error}");
    let error = index.verify().unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corruption);
    // Leaves away from the damage still answer.
    assert_eq!(index.range(Bounds::keys(50, 60)).unwrap().len(), 11);
    drop(index);

    let len = file.len().unwrap();
    file.read_exact_at(&mut byte, len - 100).unwrap();
    file.write_at(&[byte[0] ^ 0x01], len - 100).unwrap();
    let error = StreamIndex::open_on(fs.clone(), dir, options).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Corruption);
    assert!(error.to_string().contains(&segment), "{error}");
}

#[test]
fn segment_bytes_that_are_not_a_segment_are_refused_without_panicking() {
    let path = Path::new("x.seg");
    let mut rng = Rng(3);
    for len in [0usize, 10, 100, 200, 1000] {
        let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        assert_eq!(
            spillway_stream::format::check_segment(path, &bytes)
                .unwrap_err()
                .kind(),
            ErrorKind::Corruption
        );
    }
}

#[test]
fn a_failed_sync_poisons_the_store_until_it_is_reopened() {
    let fs = Arc::new(SimFs::new());
    let dir = Path::new("/p");
    let options = small_options(TemplatePolicy::Fixed);
    let index = StreamIndex::open_on(fs.clone(), dir, options.clone()).unwrap();
    index.append(1, 1, b"a").unwrap();
    fs.fail_after(0, Fault::once(libc::EIO).on(FaultTarget::Kind(OpKind::SyncData)));
    assert!(index.append(2, 2, b"b").is_err());
    let error = index.append(3, 3, b"c").unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Poisoned);
    drop(index);
    let index = StreamIndex::open_on(fs, dir, options).unwrap();
    // The write whose sync failed was not acknowledged; it may be there.
    let keys = index.range(Bounds::keys(0, 10)).unwrap().keys;
    assert!(keys == [1] || keys == [1, 2], "{keys:?}");
}

#[test]
fn full_buffers_are_written_by_the_flusher_while_writes_go_on_and_a_drop_loses_nothing() {
    let fs = Arc::new(SimFs::new());
    let dir = Path::new("/background");
    let options = Options {
        sync: false,
        ..small_options(TemplatePolicy::Rebuild { threshold: 0.05 })
    };
    let index = StreamIndex::open_on(fs.clone(), dir, options.clone()).unwrap();
    let mut model = Model::default();
    let mut rng = Rng(0xf105);
    let mut time = 0;
    for _ in 0..300 {
        let batch = random_batch(&mut rng, 1_000, &mut time, &mut model);
        index.write(&batch).unwrap();
    }
    // Every buffer that filled is a segment once the flusher is done.
    index.settle();
    let stats = index.stats();
    assert!(stats.flushes >= 20, "{stats:?}");
    assert_eq!(stats.segments, stats.flushes);
    assert_eq!(stats.next_seq, model.writes.len() as u64);
    check_queries(&index, &model, &mut rng, 1_000, 20);
    // A flush returns once its segment is written.
    index.flush().unwrap();
    let stats = index.stats();
    assert_eq!((stats.buffer_records, stats.segments), (0, stats.flushes));
    // Dropped right after a buffer filled: the flusher finishes the
    // segment, and the rest is in the log.
    for _ in 0..40 {
        let batch = random_batch(&mut rng, 1_000, &mut time, &mut model);
        index.write(&batch).unwrap();
    }
    drop(index);
    let index = StreamIndex::open_on(fs, dir, options).unwrap();
    check_queries(&index, &model, &mut rng, 1_000, 20);
    index.verify().unwrap();
}

#[test]
fn a_flush_that_fails_in_the_background_poisons_the_store_and_loses_no_acknowledged_write() {
    let fs = Arc::new(SimFs::new());
    let dir = Path::new("/failed-flush");
    let options = small_options(TemplatePolicy::Fixed);
    let index = StreamIndex::open_on(fs.clone(), dir, options.clone()).unwrap();
    // Only a flush renames (the manifest into place: when the full
    // buffer is handed over, listing the next log, and when its segment
    // is written).
    fs.fail_after(
        0,
        Fault::for_good(libc::EIO).on(FaultTarget::Kind(OpKind::Rename)),
    );
    let mut model = Model::default();
    let mut rng = Rng(0xbad);
    let mut time = 0;
    let error = loop {
        let mut attempted = model.clone();
        let batch = random_batch(&mut rng, 300, &mut time, &mut attempted);
        match index.write(&batch) {
            Ok(()) => model = attempted,
            Err(error) => break error,
        }
        assert!(
            model.writes.len() < 100_000,
            "the failed flush was never reported"
        );
    };
    // The writer that found the buffer full met the failure itself, or a
    // later one found the store poisoned by the flusher.
    assert!(
        matches!(error.kind(), ErrorKind::Poisoned | ErrorKind::Io),
        "{error}"
    );
    assert_eq!(
        index.append(1, 1, b"after").unwrap_err().kind(),
        ErrorKind::Poisoned
    );
    index.settle();
    assert_eq!(index.flush().unwrap_err().kind(), ErrorKind::Poisoned);
    drop(index);
    fs.clear_fault();
    let index = StreamIndex::open_on(fs, dir, options).unwrap();
    let all = Bounds::keys(0, u64::MAX);
    assert_eq!(rows(&index.range(all).unwrap()), model.live(&all));
}

#[test]
fn a_value_limit_above_half_a_buffer_is_capped_there() {
    let options = Options {
        buffer_bytes: 8192,
        value_bytes_max: 1 << 20,
        ..Options::default()
    };
    assert_eq!(options.value_limit(), 4096);
    let index = StreamIndex::open_on(Arc::new(SimFs::new()), Path::new("/v"), options).unwrap();
    index.append(1, 1, &[7; 4096]).unwrap();
    let error = index.append(1, 2, &[7; 4097]).unwrap_err();
    assert!(error.to_string().contains("limit of 4096"), "{error}");
}

#[test]
fn a_read_only_open_answers_queries_and_changes_nothing() {
    let fs = Arc::new(SimFs::new());
    let dir = Path::new("/ro");
    let options = small_options(TemplatePolicy::Fixed);
    let mut model = Model::default();
    let mut rng = Rng(11);
    let mut time = 0;
    {
        let index = StreamIndex::open_on(fs.clone(), dir, options.clone()).unwrap();
        for _ in 0..100 {
            index
                .write(&random_batch(&mut rng, 200, &mut time, &mut model))
                .unwrap();
        }
        // Dropped without a flush: the last buffer is only in the log.
    }
    let listing = |fs: &SimFs| {
        let mut names = fs.list_dir(dir).unwrap();
        names.sort();
        names
    };
    let before = listing(&fs);
    assert!(before.iter().any(|name| name.ends_with(".wal")), "{before:?}");
    let index = StreamIndex::open_read_only_on(fs.clone(), dir, options.clone()).unwrap();
    assert!(index.is_read_only());
    let all = Bounds::keys(0, u64::MAX);
    assert_eq!(rows(&index.range(all).unwrap()), model.live(&all));
    check_queries(&index, &model, &mut rng, 200, 10);
    for error in [
        index.append(1, 1, b"x").unwrap_err(),
        index.flush().unwrap_err(),
        index.compact().unwrap_err(),
    ] {
        assert!(error.to_string().contains("read-only"), "{error}");
    }
    index.close().unwrap();
    assert_eq!(
        listing(&fs),
        before,
        "a read-only open leaves the directory as it was"
    );
    let error = StreamIndex::open_read_only_on(fs, Path::new("/nothing"), options).unwrap_err();
    assert!(error.to_string().contains("holds no stream index"), "{error}");
}

#[test]
fn a_store_is_locked_against_a_second_process() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store");
    let options = Options {
        buffer_bytes: 1 << 20,
        ..Options::default()
    };
    let index = StreamIndex::open(&path, options.clone()).unwrap();
    index.append(5, 5, b"kept").unwrap();
    // Another open file description of LOCK stands for another process.
    for error in [
        StreamIndex::open(&path, options.clone()).unwrap_err(),
        StreamIndex::open_read_only(&path, options.clone()).unwrap_err(),
    ] {
        assert!(error.to_string().contains("open in another process"), "{error}");
    }
    index.close().unwrap();
    let reader = StreamIndex::open_read_only(&path, options.clone()).unwrap();
    let second_reader = StreamIndex::open_read_only(&path, options.clone()).unwrap();
    assert_eq!(reader.get(5).unwrap().len(), 1);
    assert_eq!(second_reader.get(5).unwrap().len(), 1);
    assert!(
        StreamIndex::open(&path, options.clone()).is_err(),
        "readers keep a writer out"
    );
    drop((reader, second_reader));
    assert_eq!(
        StreamIndex::open(&path, options).unwrap().get(5).unwrap().len(),
        1
    );
}

#[test]
fn tiers_merge_resident_segments_in_the_background_and_answer_as_the_segments_do() {
    // The same writes into a store with tiers and one without; a third
    // has a cache too small to hold them all, so its oldest tiers are
    // dropped and their segments read back from their files.
    let stores: Vec<(Arc<SimFs>, StreamIndex)> = [(true, 1 << 30), (false, 1 << 30), (true, 48 << 10)]
        .into_iter()
        .map(|(tiers, cache_bytes)| {
            let fs = Arc::new(SimFs::new());
            let options = Options {
                tiers,
                cache_bytes,
                ..small_options(TemplatePolicy::Rebuild { threshold: 0.05 })
            };
            let index = StreamIndex::open_on(fs.clone(), Path::new("/t"), options).unwrap();
            (fs, index)
        })
        .collect();
    let mut model = Model::default();
    let mut rng = Rng(0x71e5);
    let mut time = 0;
    let key_space = 2000;
    for round in 0..600 {
        let batch = random_batch(&mut rng, key_space, &mut time, &mut model);
        for (_, index) in &stores {
            index.write(&batch).unwrap();
        }
        if round % 100 == 99 {
            for (_, index) in &stores {
                index.settle();
            }
            check_queries(&stores[0].1, &model, &mut rng, key_space, 10);
            check_queries(&stores[2].1, &model, &mut rng, key_space, 10);
        }
    }
    let (with, without, small) = (stores[0].1.stats(), stores[1].1.stats(), stores[2].1.stats());
    assert_eq!(with.segments, without.segments);
    assert!(with.segments >= 16, "{with:?}");
    // A binary counter over the segments: a few tiers, every segment but
    // the newest few in one, each record merged about log2(segments)
    // times.
    assert!(with.tiers >= 1 && with.tiers <= 6, "{with:?}");
    assert!(with.tier_merges >= with.segments / 2, "{with:?}");
    assert!(
        with.tier_records >= with.segment_records && with.tier_records <= 12 * with.segment_records,
        "{with:?}"
    );
    assert_eq!((without.tiers, without.tier_merges), (0, 0));
    // Tiers count against the cache as the segments they replace did.
    assert!(with.cache_bytes <= without.cache_bytes, "{with:?} vs {without:?}");
    assert!(small.tier_merges > 0, "{small:?}");
    assert!(small.cache_bytes <= 2 * (48 << 10), "{small:?}");
    for (_, index) in &stores {
        for _ in 0..20 {
            let bounds = random_bounds(&mut rng, key_space);
            assert_eq!(
                rows(&index.range(bounds).unwrap()),
                model.live(&bounds),
                "{bounds:?}"
            );
            assert_close(&index.aggregate(bounds).unwrap(), &model.aggregate(&bounds));
        }
    }
    // A compaction drops the tiers over the segments it merges; queries
    // read the new segment.
    for (_, index) in &stores {
        index.compact().unwrap();
        index.settle();
    }
    check_queries(&stores[0].1, &model, &mut rng, key_space, 20);
    check_queries(&stores[2].1, &model, &mut rng, key_space, 20);
    // Tiers are not written anywhere: a reopened store has none until its
    // next flushes, and answers the same.
    let (fs, index) = stores.into_iter().next().unwrap();
    let options = index.options().clone();
    index.close().unwrap();
    let index = StreamIndex::open_on(fs, Path::new("/t"), options).unwrap();
    assert_eq!(index.stats().tiers, 0);
    check_queries(&index, &model, &mut rng, key_space, 10);
}
