//! `spillway stream` as a user runs it: ingest, query, stats and verify on
//! one directory; corruption and bad input reported with the file or line.

use std::path::Path;

use serde_json::Value;

mod common;

use common::{failure, path_str, success};

fn segment_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "seg"))
        .collect();
    files.sort();
    files
}

#[test]
fn generated_records_are_queried_counted_and_verified() {
    let directory = tempfile::tempdir().unwrap();
    let dir = path_str(directory.path());
    let report: Value = serde_json::from_str(&success(&[
        "stream",
        "ingest",
        "--dir",
        dir,
        "--generate",
        "60K",
        "--keys",
        "zipf",
        "--key-space",
        "10K",
        "--buffer-mib",
        "1",
        "--no-sync",
        "--json",
    ]))
    .unwrap();
    assert_eq!(report["records"], 60 * 1024);
    assert_eq!(report["stats"]["segment_records"], 60 * 1024);
    assert!(report["records_per_second"].as_f64().unwrap() > 0.0);

    let range = ["--key-low", "100", "--key-high", "2999"];
    let lines = success(&[&["stream", "query", "--dir", dir][..], &range[..]].concat());
    let aggregate: Value = serde_json::from_str(&success(
        &[
            &["stream", "query", "--dir", dir, "--aggregate", "--json"][..],
            &range[..],
        ]
        .concat(),
    ))
    .unwrap();
    let count = aggregate["count"].as_u64().unwrap();
    assert!(count > 0 && count < 60 * 1024, "{count}");
    assert_eq!(lines.lines().count() as u64, count);
    assert_eq!(
        aggregate["numeric"], aggregate["count"],
        "generated values are numbers"
    );
    let mut sum = 0.0;
    for line in lines.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        let key: u64 = fields[0].parse().unwrap();
        assert!((100..=2999).contains(&key), "{line}");
        sum += fields[2].parse::<f64>().unwrap();
    }
    let reported = aggregate["sum"].as_f64().unwrap();
    assert!(
        (sum - reported).abs() <= 1e-9 * reported.abs(),
        "{sum} vs {reported}"
    );

    let limited = success(
        &[
            &["stream", "query", "--dir", dir, "--limit", "5", "--json"][..],
            &range[..],
        ]
        .concat(),
    );
    let records: Vec<Value> = limited
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(records.len(), 5);
    assert!(records[0]["value"].is_f64() && records[0]["time"].is_u64());

    let stats: Value = serde_json::from_str(&success(&["stream", "stats", "--dir", dir, "--json"])).unwrap();
    assert_eq!(stats["segment_records"], 60 * 1024);
    assert!(stats["segments"].as_u64().unwrap() >= 2, "{stats}");
    assert!(stats["total_overflow"]["overflowed"].is_array(), "{stats}");
    let text = success(&["stream", "stats", "--dir", dir]);
    assert!(text.contains("segment_records 61440"), "{text}");

    let verified = success(&["stream", "verify", "--dir", dir]);
    assert!(
        verified.contains("61440 records") && verified.ends_with("ok\n"),
        "{verified}"
    );
    let report: Value =
        serde_json::from_str(&success(&["stream", "verify", "--dir", dir, "--json"])).unwrap();
    assert_eq!(report["segments"], stats["segments"]);
}

#[test]
fn a_corrupted_segment_fails_verify_naming_the_file() {
    let directory = tempfile::tempdir().unwrap();
    let dir = path_str(directory.path());
    success(&["stream", "ingest", "--dir", dir, "--generate", "5K", "--no-sync"]);
    let segment = segment_files(directory.path()).remove(0);
    let mut bytes = std::fs::read(&segment).unwrap();
    // Inside the first record of the first leaf: the meta block and the
    // footer, which opening reads, stay whole.
    bytes[10] ^= 0x40;
    std::fs::write(&segment, bytes).unwrap();
    let error = failure(&["stream", "verify", "--dir", dir]);
    let name = segment.file_name().unwrap().to_str().unwrap();
    assert!(error.contains("corruption") && error.contains(name), "{error}");
}

#[test]
fn csv_records_round_trip_and_bad_lines_are_named() {
    let directory = tempfile::tempdir().unwrap();
    let dir = directory.path().join("index");
    let dir = path_str(&dir);
    let input = directory.path().join("ticks.csv");
    std::fs::write(
        &input,
        "key,time,value\n5,10,2.5\n5,11,hello, world\n\n7,12,\"3\"\r\n9,13,-1\n",
    )
    .unwrap();
    let input = path_str(&input);
    success(&["stream", "ingest", "--dir", dir, "--input", input, "--header"]);
    let records: Vec<Value> = success(&["stream", "query", "--dir", dir, "--json"])
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let values: Vec<&Value> = records.iter().map(|record| &record["value"]).collect();
    assert_eq!(
        values,
        [
            &Value::from(2.5),
            &Value::from("hello, world"),
            &Value::from("3"),
            &Value::from(-1.0)
        ]
    );
    let aggregate: Value = serde_json::from_str(&success(&[
        "stream",
        "query",
        "--dir",
        dir,
        "--aggregate",
        "--json",
    ]))
    .unwrap();
    assert_eq!(aggregate["count"], 4);
    assert_eq!(aggregate["numeric"], 2);
    assert_eq!(aggregate["sum"], 1.5);
    let error = failure(&["stream", "query", "--dir", dir, "--values", "float"]);
    assert!(
        error.contains("record 1 (key 5, time 11) has a 12-byte value"),
        "{error}"
    );

    let bad = directory.path().join("bad.csv");
    std::fs::write(&bad, "1,1,1\n2,2,2\nthree,3,3\n4,4,4\n").unwrap();
    let bad_dir = directory.path().join("bad");
    let error = failure(&[
        "stream",
        "ingest",
        "--dir",
        path_str(&bad_dir),
        "--input",
        path_str(&bad),
    ]);
    assert!(
        error.contains("bad.csv line 3") && error.contains("the key 'three'"),
        "{error}"
    );
    assert!(error.contains("the 2 records before it were written"), "{error}");
    let kept = success(&["stream", "query", "--dir", path_str(&bad_dir)]);
    assert_eq!(kept.lines().count(), 2, "{kept}");

    std::fs::write(&bad, "1,1,1\n2,2,long value\n").unwrap();
    let error = failure(&[
        "stream",
        "ingest",
        "--dir",
        path_str(&bad_dir),
        "--input",
        path_str(&bad),
        "--max-value-bytes",
        "8",
    ]);
    assert!(
        error.contains("bad.csv: invalid argument: line 2 (key 2, time 2) has a value of 10 bytes")
            && error.contains("max_value_bytes"),
        "{error}"
    );

    std::fs::write(&bad, "1,5,1\n2,4,2\n").unwrap();
    let error = failure(&[
        "stream",
        "ingest",
        "--dir",
        path_str(&directory.path().join("ordered")),
        "--input",
        path_str(&bad),
        "--ordered-time",
    ]);
    assert!(
        error.contains("line 2 (key 2) has time 4, before the time 5 of line 1")
            && error.contains("ordered_time"),
        "{error}"
    );
}

#[test]
fn read_commands_refuse_a_directory_without_an_index() {
    let directory = tempfile::tempdir().unwrap();
    let missing = directory.path().join("typo");
    for command in ["query", "stats", "verify"] {
        let error = failure(&["stream", command, "--dir", path_str(&missing)]);
        assert!(error.contains("holds no stream index"), "{command}: {error}");
    }
    assert!(!missing.exists(), "a read must not create the directory");
    let error = failure(&[
        "stream",
        "ingest",
        "--dir",
        path_str(&missing),
        "--generate",
        "10",
        "--template",
        "fixed",
        "--rebuild-threshold",
        "0.2",
    ]);
    assert!(
        error.contains("rebuild_threshold applies only to template 'rebuild'"),
        "{error}"
    );
}
