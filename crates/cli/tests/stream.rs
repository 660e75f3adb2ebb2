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
        "--value-bytes-max",
        "8",
    ]);
    assert!(
        error.contains("bad.csv: line 2 (key 2, time 2) has a value of 10 bytes")
            && error.contains("value_bytes_max"),
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

/// Writes `count` records with the library and drops the index without a
/// flush: they are in its log only.
fn records_in_the_log(dir: &Path, count: u64) {
    let index = spillway_stream::StreamIndex::open(
        dir,
        spillway_stream::Options {
            buffer_bytes: 1 << 20,
            ..spillway_stream::Options::default()
        },
    )
    .unwrap();
    for key in 0..count {
        index.append(key, key, &(key as f64).to_le_bytes()).unwrap();
    }
}

fn log_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "wal"))
        .collect();
    files.sort();
    files
}

#[test]
fn a_deleted_or_cut_log_fails_verify_naming_it_and_repair_keeps_the_rest() {
    for cut in [false, true] {
        let directory = tempfile::tempdir().unwrap();
        let dir = path_str(directory.path());
        success(&["stream", "ingest", "--dir", dir, "--generate", "3K", "--no-sync"]);
        records_in_the_log(directory.path(), 500);
        let aggregate = success(&["stream", "query", "--dir", dir, "--aggregate", "--json"]);
        assert!(
            aggregate.contains("\"count\":3572"),
            "3072 generated and 500 appended: {aggregate}"
        );
        let log = log_files(directory.path()).remove(0);
        let name = log.file_name().unwrap().to_str().unwrap().to_string();
        if cut {
            let bytes = std::fs::read(&log).unwrap();
            let written = bytes.iter().rposition(|&byte| byte != 0).unwrap() + 1;
            std::fs::write(&log, &bytes[..written / 2]).unwrap();
        } else {
            std::fs::remove_file(&log).unwrap();
        }
        let error = failure(&["stream", "verify", "--dir", dir]);
        assert!(
            error.contains("corruption") && error.contains(&name) && error.contains("repair"),
            "{error}"
        );
        let error = failure(&["stream", "query", "--dir", dir]);
        assert!(error.contains(&name), "{error}");

        let report: Value = serde_json::from_str(&success(&["stream", "repair", dir, "--json"])).unwrap();
        assert_eq!(report["rebuilt"], true, "{report}");
        assert!(report["records_lost"].as_u64().unwrap() > 0, "{report}");
        assert!(
            report["lost"]
                .as_array()
                .unwrap()
                .iter()
                .any(|lost| lost["file"] == name.as_str()),
            "{report}"
        );
        let verified = success(&["stream", "verify", "--dir", dir]);
        assert!(verified.ends_with("ok\n"), "{verified}");
        let aggregate: Value = serde_json::from_str(&success(&[
            "stream",
            "query",
            "--dir",
            dir,
            "--aggregate",
            "--json",
        ]))
        .unwrap();
        let count = aggregate["count"].as_u64().unwrap();
        assert!(
            (3072..3572).contains(&count),
            "the generated records stay, some of the logged ones are lost: {count}"
        );
        let text = success(&["stream", "repair", "--dir", dir]);
        assert!(text.contains("nothing to repair"), "{text}");
        assert!(directory.path().join("lost").join(&name).exists() || !cut);
    }
}

#[test]
fn a_damaged_segment_leaves_the_other_queries_answered_and_repair_names_the_loss() {
    let directory = tempfile::tempdir().unwrap();
    let dir = path_str(directory.path());
    let input = directory.path().join("ticks.csv");
    // Three flushes of key ranges apart: three segments.
    let mut segments = Vec::new();
    for part in 0..3u64 {
        let lines: String = (part * 1000..part * 1000 + 100)
            .map(|key| format!("{key},{key},{key}\n"))
            .collect();
        std::fs::write(&input, lines).unwrap();
        success(&["stream", "ingest", "--dir", dir, "--input", path_str(&input)]);
        let all = segment_files(directory.path());
        segments.push(all.last().unwrap().clone());
    }
    let middle = &segments[1];
    let len = std::fs::metadata(middle).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(middle)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let name = middle.file_name().unwrap().to_str().unwrap();

    let output = common::spillway(&["stream", "query", "--dir", dir, "--key-high", "999"]);
    assert!(output.status.success());
    assert_eq!(String::from_utf8_lossy(&output.stdout).lines().count(), 100);
    let warning = String::from_utf8_lossy(&output.stderr);
    assert!(warning.contains("could not be opened"), "{warning}");
    let error = failure(&[
        "stream",
        "query",
        "--dir",
        dir,
        "--key-low",
        "1000",
        "--key-high",
        "1999",
    ]);
    assert!(error.contains(name) && error.contains("corruption"), "{error}");
    let error = failure(&["stream", "verify", "--dir", dir]);
    assert!(error.contains(name), "{error}");
    let error = failure(&["stream", "ingest", "--dir", dir, "--input", path_str(&input)]);
    assert!(error.contains(name) && error.contains("read-only"), "{error}");

    let text = success(&["stream", "repair", dir]);
    assert!(
        text.contains(name) && text.contains("about 100 writes lost"),
        "{text}"
    );
    let lines = success(&["stream", "query", "--dir", dir]);
    assert_eq!(lines.lines().count(), 200);
}

#[test]
fn nan_and_infinite_values_are_refused_naming_the_line() {
    let directory = tempfile::tempdir().unwrap();
    let dir = directory.path().join("index");
    let input = directory.path().join("readings.csv");
    std::fs::write(&input, "1,1,1.5\n2,2,\"NaN\"\n3,3,NaN\n4,4,4\n").unwrap();
    let error = failure(&[
        "stream",
        "ingest",
        "--dir",
        path_str(&dir),
        "--input",
        path_str(&input),
    ]);
    assert!(
        error.contains("readings.csv line 3") && error.contains("'NaN'") && error.contains("must be finite"),
        "{error}"
    );
    assert!(error.contains("the 2 records before it were written"), "{error}");
    let aggregate: Value = serde_json::from_str(&success(&[
        "stream",
        "query",
        "--dir",
        path_str(&dir),
        "--aggregate",
        "--json",
    ]))
    .unwrap();
    // The quoted NaN is text: counted, not summed.
    assert_eq!(aggregate["count"], 2);
    assert_eq!(aggregate["numeric"], 1);
    assert_eq!(aggregate["sum"], 1.5);
    std::fs::write(&input, "5,5,-inf\n").unwrap();
    let error = failure(&[
        "stream",
        "ingest",
        "--dir",
        path_str(&dir),
        "--input",
        path_str(&input),
    ]);
    assert!(error.contains("line 1") && error.contains("'-inf'"), "{error}");
}

#[test]
fn an_interrupted_ingest_exits_130_and_leaves_a_store_that_verifies() {
    let directory = tempfile::tempdir().unwrap();
    let dir = path_str(directory.path());
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args([
            "stream",
            "ingest",
            "--dir",
            dir,
            "--generate",
            "200M",
            "--buffer-mib",
            "1",
            "--no-sync",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Once a segment is written, the ingest is well under way.
    while segment_files(directory.path()).is_empty() {
        assert!(child.try_wait().unwrap().is_none(), "the ingest ended early");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let killed = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    let verified = success(&["stream", "verify", "--dir", dir]);
    assert!(verified.ends_with("ok\n"), "{verified}");
    let stats: Value = serde_json::from_str(&success(&["stream", "stats", "--dir", dir, "--json"])).unwrap();
    let records = stats["segment_records"].as_u64().unwrap() + stats["buffer_records"].as_u64().unwrap();
    assert!(records > 0 && records < 200 << 20, "{stats}");
    assert_eq!(
        stats["buffer_records"], 0,
        "the records written were flushed: {stats}"
    );
}
