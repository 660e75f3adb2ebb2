//! The crash-state enumeration: the images the x86 persistency model
//! allows, no more and no fewer, and a missing flush caught by an oracle.

use std::collections::BTreeSet;

use spillway_core::{Error, Result};
use spillway_pmem::crash::{enumerate, CrashPoint, Limits, Report};
use spillway_pmem::region::MIN_SIZE;
use spillway_pmem::{Event, Persist, Region, Tracing};

fn store(at: u64, value: u64) -> Event {
    Event::Store {
        at,
        bytes: value.to_le_bytes().to_vec(),
    }
}

fn word(image: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(image[at..at + 8].try_into().unwrap())
}

/// Every (crash point, image) pair a replay of `events` over 256 zero bytes visits.
fn visits(events: &[Event]) -> (Report, Vec<(CrashPoint, Vec<u8>)>) {
    let mut seen = Vec::new();
    let report = enumerate(&[0; 256], events, Limits::default(), |point, image| {
        seen.push((point.clone(), image.to_vec()));
        Ok(())
    })
    .unwrap();
    (report, seen)
}

#[test]
fn a_flushed_and_fenced_word_is_old_or_new_before_the_fence_and_new_after_the_end() {
    let events = [
        Event::Begin { operation: "set" },
        store(64, 7),
        Event::Flush { line: 1 },
        Event::Fence,
        Event::End,
    ];
    let (report, seen) = visits(&events);
    assert_eq!(
        (report.points, report.images, report.exhaustive_points),
        (2, 3, 2)
    );
    assert!(report.dirty_at_end.is_empty() && report.clean_flushes.is_empty());
    let before: Vec<u64> = seen
        .iter()
        .filter(|(p, _)| p.event == 3)
        .map(|(_, i)| word(i, 64))
        .collect();
    assert_eq!(before, vec![0, 7]);
    assert_eq!(
        seen[0].0,
        CrashPoint {
            event: 3,
            completed: 0,
            in_flight: Some("set")
        }
    );
    let after: Vec<_> = seen.iter().filter(|(p, _)| p.event == 4).collect();
    assert_eq!(after.len(), 1);
    assert_eq!(
        (after[0].0.completed, after[0].0.in_flight, word(&after[0].1, 64)),
        (1, None, 7)
    );
}

#[test]
fn stores_to_one_line_persist_in_order_and_lines_independently() {
    // A then B on line 1 (B never without A), C on line 2, no flush.
    let (_, seen) = visits(&[store(64, 1), store(72, 2), store(128, 3), Event::Fence]);
    let images: BTreeSet<(u64, u64, u64)> = seen
        .iter()
        .map(|(_, i)| (word(i, 64), word(i, 72), word(i, 128)))
        .collect();
    let expected: BTreeSet<_> = [(0, 0), (1, 0), (1, 2)]
        .into_iter()
        .flat_map(|(a, b)| [(a, b, 0), (a, b, 3)])
        .collect();
    assert_eq!(images, expected);
}

#[test]
fn a_copy_is_torn_only_at_word_boundaries() {
    // 16 bytes at 60: bytes 60..64 (line 0), 64..72 and 72..76 (line 1).
    let (report, seen) = visits(&[
        Event::Store {
            at: 60,
            bytes: vec![0xee; 16],
        },
        Event::Fence,
    ]);
    assert_eq!(report.images, 2 * 3);
    for (_, image) in &seen {
        for word in [&image[60..64], &image[64..72], &image[72..76]] {
            assert!(
                word.iter().all(|&b| b == 0) || word.iter().all(|&b| b == 0xee),
                "{word:?}"
            );
        }
        assert!(image[72] == 0 || image[64] == 0xee, "line 1 persists in order");
    }
}

#[test]
fn a_line_dirty_at_an_operations_end_and_a_flush_of_a_clean_line_are_reported() {
    let events = [
        Event::Begin { operation: "put" },
        store(8, 1),
        Event::Flush { line: 3 },
        Event::End,
    ];
    let (report, seen) = visits(&events);
    assert_eq!(report.dirty_at_end, vec![(3, 0)]);
    assert_eq!(report.clean_flushes, vec![(2, 3)]);
    // After the end the store may still be lost: the oracle sees both.
    assert_eq!(seen.len(), 2);
}

#[test]
fn many_dirty_lines_get_the_targeted_images_and_a_seeded_sample() {
    let events: Vec<Event> = (0..13)
        .map(|line| store(line * 64, line + 1))
        .chain([Event::Fence])
        .collect();
    let region = vec![0u8; 13 * 64];
    let mut images = Vec::new();
    let limits = Limits {
        images_per_point: 100,
        seed: 9,
    };
    let report = enumerate(&region, &events, limits, |_, image| {
        images.push(
            (0..13)
                .map(|line| word(image, line * 64) != 0)
                .collect::<Vec<bool>>(),
        );
        Ok(())
    })
    .unwrap();
    assert_eq!((report.images, report.exhaustive_points), (100, 0));
    assert!(
        images[0].iter().all(|&persisted| !persisted),
        "nothing new persisted"
    );
    assert!(
        images[1].iter().all(|&persisted| persisted),
        "everything persisted"
    );
    for line in 0..13 {
        assert!(
            images
                .iter()
                .any(|i| i.iter().enumerate().all(|(l, &p)| p == (l == line))),
            "line {line} alone"
        );
        assert!(
            images
                .iter()
                .any(|i| i.iter().enumerate().all(|(l, &p)| p != (l == line))),
            "all but {line}"
        );
    }
    let again = {
        let mut again = Vec::new();
        enumerate(&region, &events, limits, |_, image| {
            again.push(
                (0..13)
                    .map(|line| word(image, line * 64) != 0)
                    .collect::<Vec<bool>>(),
            );
            Ok(())
        })
        .unwrap();
        again
    };
    assert_eq!(images, again, "the sample is the seed's");
    let tiny = Limits {
        images_per_point: 1,
        seed: 1,
    };
    assert!(enumerate(&region, &events, tiny, |_, _| Ok(())).is_err());
}

/// Publishes a value out of line: the value at 256, then a pointer to it at
/// 128 (the root of this toy structure), each persisted; `skip_value_flush`
/// leaves out the value's flush.
fn publish(skip_value_flush: bool) -> (Vec<u8>, Vec<Event>) {
    let trace = Tracing::default();
    let region = Region::in_memory(MIN_SIZE, "toy").unwrap();
    trace.take();
    let base = region.image();
    trace.begin("publish");
    trace.copy(&region, 256, &0xabcd_u64.to_le_bytes());
    if !skip_value_flush {
        trace.flush(&region, 256, 8);
    }
    trace.fence();
    trace.persist_word(&region, 128, 256);
    trace.end();
    (base, trace.take())
}

/// The toy's oracle: a published pointer leads to the whole value, and once
/// the operation completed the pointer is there.
fn oracle(point: &CrashPoint, image: &[u8]) -> Result<()> {
    let pointer = word(image, 128);
    if pointer != 0 && word(image, pointer as usize) != 0xabcd {
        return Err(Error::Internal(format!(
            "at event {}: a pointer to a value that is not there",
            point.event
        )));
    }
    if point.completed == 1 && pointer == 0 {
        return Err(Error::Internal(format!(
            "at event {}: a completed publish was lost",
            point.event
        )));
    }
    Ok(())
}

#[test]
fn the_oracle_passes_a_correct_publish_and_catches_the_missing_flush() {
    let (base, events) = publish(false);
    let report = enumerate(&base, &events, Limits::default(), oracle).unwrap();
    assert_eq!(report.points, 3);
    assert!(report.dirty_at_end.is_empty() && report.clean_flushes.is_empty());
    let (base, events) = publish(true);
    let caught = enumerate(&base, &events, Limits::default(), oracle).unwrap_err();
    assert!(
        caught
            .to_string()
            .contains("a pointer to a value that is not there"),
        "{caught}"
    );
}
