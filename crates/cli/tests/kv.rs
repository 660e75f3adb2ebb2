//! `spillway kv` as a user runs it: load from a file in `spillway gen kv`'s
//! format and in merge mode, read back, dump the tree; bad input and a
//! missing store reported with the line or directory.

use serde_json::Value;

mod common;

use common::{failure, spillway, success};

#[test]
fn operations_from_gen_kv_load_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let ops = dir.path().join("ops.txt");
    let db = dir.path().join("db");
    let (ops, db) = (ops.to_str().unwrap(), db.to_str().unwrap());
    success(&[
        "gen",
        "kv",
        "--preset",
        "fillrandom",
        "--ops",
        "150000",
        "--key-bytes",
        "8",
        "--value-bytes",
        "8",
        "--output",
        ops,
    ]);
    let report: Value = serde_json::from_str(&success(&[
        "kv",
        "load",
        "--dir",
        db,
        "--input",
        ops,
        "--root-mib",
        "1",
        "--node-mib",
        "1",
        "--fan-out",
        "4",
        "--sync",
        "none",
        "--json",
    ]))
    .unwrap();
    assert_eq!(report["operations"], 150000);
    // The last PUT of a key in the file is what the store holds.
    let text = std::fs::read_to_string(ops).unwrap();
    let mut last = std::collections::HashMap::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        if fields[0] == "PUT" {
            last.insert(fields[1].to_string(), fields[2].to_string());
        }
    }
    let (key, value) = last.iter().next().unwrap();
    assert_eq!(
        success(&["kv", "get", "--dir", db, "--hex", key]),
        format!("{key}\t{value}\n")
    );
    let scanned = success(&["kv", "scan", "--dir", db, "--hex"]);
    assert_eq!(scanned.lines().count(), last.len());
    let limited = success(&["kv", "scan", "--dir", db, "--limit", "3", "--json"]);
    assert_eq!(limited.lines().count(), 3);
    let dump: Value = serde_json::from_str(&success(&["kv", "dump", "--dir", db, "--json"])).unwrap();
    let nodes = dump.as_array().unwrap();
    assert_eq!(nodes[0]["id"], 0);
    assert!(
        nodes.len() > 2,
        "a megabyte root over 150000 puts spills and splits"
    );
    assert!(success(&["kv", "dump", "--dir", db]).starts_with("root 0"));
    assert!(success(&["kv", "verify", "--dir", db]).starts_with("kv verify: OK"));
}

#[test]
fn merge_mode_aggregates_and_readers_find_the_function() {
    let dir = tempfile::tempdir().unwrap();
    let ops = dir.path().join("ops.txt");
    let db = dir.path().join("counts");
    let hex = |text: &str| text.bytes().map(|byte| format!("{byte:02x}")).collect::<String>();
    let mut lines = String::new();
    for i in 0..500 {
        lines += &format!(
            "MERGE\t{}\t{}\n",
            hex(&format!("word{}", i % 7)),
            hex(&(i % 10).to_string())
        );
    }
    std::fs::write(&ops, lines).unwrap();
    let (ops, db) = (ops.to_str().unwrap(), db.to_str().unwrap());
    success(&[
        "kv",
        "load",
        "--dir",
        db,
        "--input",
        ops,
        "--merge",
        "sum+count",
        "--sync",
        "none",
    ]);
    let expected_sum: i64 = (0..500).filter(|i| i % 7 == 3).map(|i| (i % 10) as i64).sum();
    let count = (0..500).filter(|i| i % 7 == 3).count();
    assert_eq!(
        success(&["kv", "get", "--dir", db, "word3"]),
        format!("word3\t[{expected_sum}, {count}]\n")
    );
    let output = spillway(&["kv", "get", "--dir", db, "word3", "missing", "--json"]);
    assert_eq!(output.status.code(), Some(1), "a missing key is exit status 1");
    let json: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["word3"], format!("[{expected_sum}, {count}]"));
    assert!(json["missing"].is_null());
}

#[test]
fn bad_input_and_missing_stores_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let ops = dir.path().join("ops.txt");
    std::fs::write(&ops, "PUT\t6161\t6262\nPUT\tzz\t00\n").unwrap();
    let db = dir.path().join("db");
    let error = failure(&[
        "kv",
        "load",
        "--dir",
        db.to_str().unwrap(),
        "--input",
        ops.to_str().unwrap(),
        "--sync",
        "none",
    ]);
    assert!(
        error.contains("line 2") && error.contains("1 operations before it were written"),
        "{error}"
    );
    assert_eq!(
        success(&["kv", "get", "--dir", db.to_str().unwrap(), "aa"]),
        "aa\tbb\n"
    );
    let missing = dir.path().join("nothing");
    let error = failure(&["kv", "stats", "--dir", missing.to_str().unwrap()]);
    assert!(error.contains("holds no key-value store"), "{error}");
    assert!(!missing.exists(), "reading does not create a store");
    let error = failure(&[
        "kv",
        "load",
        "--dir",
        db.to_str().unwrap(),
        "--generate",
        "10",
        "--merge",
        "first",
    ]);
    assert!(error.contains("depends on the order"), "{error}");
}
