//! kill -9 on the real file system: a child process writes until it is
//! killed at a random moment (mid-log-write, mid-spill, mid-split,
//! mid-manifest edit); every batch it acknowledged must be there after
//! reopening, and the store must verify.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use common::{key, small_options, value, Rng};
use spillway_kv::{Options, Store, SyncMode, WriteBatch};

const BATCH: u64 = 25;
const KEYS: u64 = 20_000;
const DIR_VARIABLE: &str = "SPILLWAY_KV_KILL_DIR";
const START_VARIABLE: &str = "SPILLWAY_KV_KILL_START";
const ROUND_VARIABLE: &str = "SPILLWAY_KV_KILL_ROUND";

fn options(round: u64) -> Options {
    Options {
        // Both: a process crash loses nothing written to the page cache.
        sync: if round.is_multiple_of(2) {
            SyncMode::Always
        } else {
            SyncMode::None
        },
        ..small_options()
    }
}

/// The writes of batch `number`: (key slot, value).
fn writes(number: u64) -> impl Iterator<Item = (u64, Vec<u8>)> {
    // Keys come back in later batches: overwrites collapse in spills.
    (number * BATCH..(number + 1) * BATCH).map(move |i| (i % KEYS, value(i, number, 50)))
}

/// The child: writes batches from the start it is given, printing the
/// number of each once it is acknowledged, until it is killed.
#[test]
#[ignore = "the child process of kill_nine_loses_no_acknowledged_write; it writes until killed"]
fn child_writer() {
    let variable = |name: &str| std::env::var(name).expect("run by kill_nine_loses_no_acknowledged_write");
    let start: u64 = variable(START_VARIABLE).parse().unwrap();
    let round: u64 = variable(ROUND_VARIABLE).parse().unwrap();
    let store = Store::open(variable(DIR_VARIABLE), options(round)).unwrap();
    let mut stdout = std::io::stdout().lock();
    for number in start.. {
        let mut batch = WriteBatch::new();
        for (slot, value) in writes(number) {
            batch.put(&key(slot), &value);
        }
        store.write(&batch).unwrap();
        writeln!(stdout, "acknowledged {number}").unwrap();
        stdout.flush().unwrap();
    }
}

#[test]
fn kill_nine_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut rng = Rng(2024);
    let mut expected: Vec<Option<Vec<u8>>> = vec![None; KEYS as usize];
    let mut start = 0u64;
    for round in 0..6u64 {
        let mut child = Command::new(&exe)
            .args([
                "--ignored",
                "--exact",
                "child_writer",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(DIR_VARIABLE, dir.path())
            .env(START_VARIABLE, start.to_string())
            .env(ROUND_VARIABLE, round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let acknowledged = |line: std::io::Result<String>| -> Option<u64> {
            line.unwrap()
                .strip_prefix("acknowledged ")
                .map(|number| number.parse().unwrap())
        };
        let kill_after = start + 50 + rng.below(400);
        let mut last = None;
        for line in lines.by_ref() {
            if let Some(number) = acknowledged(line) {
                last = Some(number);
                if number >= kill_after {
                    break;
                }
            }
        }
        child.kill().unwrap();
        // What it printed before it died was acknowledged too.
        last = lines.filter_map(acknowledged).last().or(last);
        child.wait().unwrap();
        let last = last.expect("the child acknowledged something");
        for number in start..=last {
            for (slot, value) in writes(number) {
                expected[slot as usize] = Some(value);
            }
        }
        let store = Store::open(dir.path(), options(round)).unwrap();
        // The batch in flight when the child died is there whole or not at all.
        let in_flight: Vec<(u64, Vec<u8>)> = writes(last + 1).collect();
        let landed = store.get(&key(in_flight[0].0)).unwrap() == Some(in_flight[0].1.clone());
        if landed {
            for (slot, value) in in_flight {
                expected[slot as usize] = Some(value);
            }
        }
        for (slot, value) in expected.iter().enumerate() {
            assert_eq!(
                &store.get(&key(slot as u64)).unwrap(),
                value,
                "round {round}: key {slot} (in flight landed: {landed})"
            );
        }
        store.verify().unwrap();
        drop(store);
        start = last + 2;
    }
    let store = Store::open(dir.path(), small_options()).unwrap();
    assert!(store.stats().nodes > 2, "the loop ran through spills and splits");
}
