//! `spillway kv` as a user runs it: load from a file in `spillway gen kv`'s
//! format and in merge mode, read back, dump the tree; bad input and a
//! missing store reported with the line or directory; repair; interrupts;
//! binary keys on a terminal.

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

/// Writes `PUT` lines for `pairs` (raw bytes) into `path`.
fn write_ops(path: &std::path::Path, pairs: &[(&[u8], &[u8])]) {
    let hex = |bytes: &[u8]| bytes.iter().map(|byte| format!("{byte:02x}")).collect::<String>();
    let lines: String = pairs
        .iter()
        .map(|(key, value)| format!("PUT\t{}\t{}\n", hex(key), hex(value)))
        .collect();
    std::fs::write(path, lines).unwrap();
}

#[test]
fn load_stops_between_batches_on_sigint_or_sigterm_and_keeps_a_valid_store() {
    for (signal, status) in [("-INT", 130), ("-TERM", 143)] {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_spillway"))
            .args(["kv", "load", "--dir", db.to_str().unwrap(), "--generate", "200M"])
            .args([
                "--key-bytes",
                "8",
                "--value-bytes",
                "8",
                "--sync",
                "none",
                "--root-mib",
                "4",
            ])
            .args(["--node-mib", "8", "--fan-out", "4"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Loading for a while: its first root spilled.
        let started = std::time::Instant::now();
        while !std::fs::read_dir(&db)
            .map(|entries| {
                entries
                    .flatten()
                    .any(|entry| entry.file_name().to_string_lossy().ends_with(".list"))
            })
            .unwrap_or(false)
        {
            assert!(started.elapsed().as_secs() < 60, "no list file after a minute");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let killed = std::process::Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(status), "{signal}: {stderr}");
        assert!(stderr.contains("which the store in"), "{stderr}");
        // What it wrote is a valid store, closed cleanly.
        let db = db.to_str().unwrap();
        assert!(success(&["kv", "verify", "--dir", db]).starts_with("kv verify: OK"));
        let report: Value = serde_json::from_str(&success(&["kv", "repair", db, "--json"])).unwrap();
        assert_eq!(report["repaired"], false, "{report}");
        let scanned = spillway(&["kv", "scan", "--dir", db, "--hex"]);
        assert!(scanned.stdout.split(|&byte| byte == b'\n').count() > 1000);
    }
}

#[test]
fn a_failed_load_leaves_nothing_it_created() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let db_str = db.to_str().unwrap();
    // A missing input: no store is created.
    let missing = dir.path().join("missing.txt");
    let error = failure(&[
        "kv",
        "load",
        "--dir",
        db_str,
        "--input",
        missing.to_str().unwrap(),
    ]);
    assert!(error.contains("missing.txt"), "{error}");
    assert!(!db.exists(), "a failed load created {}", db.display());
    // Options refused: no directory holding only LOCK.
    let error = failure(&[
        "kv",
        "load",
        "--dir",
        db_str,
        "--generate",
        "10",
        "--root-mib",
        "0",
    ]);
    assert!(error.contains("root_bytes"), "{error}");
    assert!(!db.exists(), "a failed open left {}", db.display());
    // A store opened with the wrong merge function keeps exactly its files.
    success(&[
        "kv",
        "load",
        "--dir",
        db_str,
        "--generate",
        "100",
        "--sync",
        "none",
    ]);
    let before: Vec<_> = std::fs::read_dir(&db)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    let error = failure(&[
        "kv",
        "load",
        "--dir",
        db_str,
        "--generate",
        "10",
        "--merge",
        "sum",
    ]);
    assert!(error.contains("merge operator"), "{error}");
    let after: Vec<_> = std::fs::read_dir(&db)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(before.len(), after.len(), "{before:?} {after:?}");
}

#[test]
fn scan_writes_raw_bytes_when_piped_and_escapes_them_on_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let ops = dir.path().join("ops.txt");
    write_ops(&ops, &[(b"\x00\xffA", b"v\x1b[2J")]);
    let db = dir.path().join("db");
    let db = db.to_str().unwrap();
    success(&[
        "kv",
        "load",
        "--dir",
        db,
        "--input",
        ops.to_str().unwrap(),
        "--sync",
        "none",
    ]);
    // Piped: the bytes themselves.
    let piped = spillway(&["kv", "scan", "--dir", db]);
    assert!(piped.status.success());
    assert_eq!(piped.stdout, b"\x00\xffA\tv\x1b[2J\n");
    let hex = success(&["kv", "scan", "--dir", db, "--hex"]);
    assert_eq!(hex, "00ff41\t761b5b324a\n");
    // On a terminal (through `script`, which runs the command on a
    // pseudo-terminal): escaped, unless --raw.
    let on_terminal = |extra: &str| -> Option<Vec<u8>> {
        let command = format!("{} kv scan --dir {db} {extra}", env!("CARGO_BIN_EXE_spillway"));
        let output = std::process::Command::new("script")
            .args(["-qec", &command, "/dev/null"])
            .output()
            .ok()?;
        output.status.success().then_some(output.stdout)
    };
    let Some(escaped) = on_terminal("") else {
        eprintln!("no `script` to run a pseudo-terminal: the terminal half is not checked");
        return;
    };
    let escaped = String::from_utf8_lossy(&escaped).into_owned();
    assert!(escaped.contains("\\x00\\xffA\tv\\x1b[2J"), "{escaped:?}");
    assert!(!escaped.contains('\0'), "{escaped:?}");
    let raw = on_terminal("--raw").unwrap();
    assert!(raw.windows(3).any(|window| window == b"\x00\xffA"), "{raw:?}");
}

#[test]
fn repair_rebuilds_a_damaged_store_and_says_what_was_lost() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let db_str = db.to_str().unwrap();
    success(&[
        "kv",
        "load",
        "--dir",
        db_str,
        "--generate",
        "60000",
        "--key-bytes",
        "8",
        "--value-bytes",
        "8",
        "--sync",
        "none",
        "--root-mib",
        "1",
        "--node-mib",
        "2",
        "--fan-out",
        "4",
    ]);
    let before = success(&["kv", "scan", "--dir", db_str, "--hex"]);
    // A healthy store: repair changes nothing.
    let text = success(&["kv", "repair", db_str]);
    assert!(text.contains("nothing changed"), "{text}");
    std::fs::remove_file(db.join("CURRENT")).unwrap();
    let error = failure(&["kv", "verify", "--dir", db_str]);
    assert!(
        error.contains("CURRENT") && error.contains("spillway kv repair"),
        "{error}"
    );
    let text = success(&["kv", "repair", "--dir", db_str]);
    assert!(
        text.contains("rebuilt") && text.contains("0 records lost"),
        "{text}"
    );
    assert!(success(&["kv", "verify", "--dir", db_str]).starts_with("kv verify: OK"));
    let mut after: Vec<&str> = success(&["kv", "scan", "--dir", db_str, "--hex"])
        .leak()
        .lines()
        .collect();
    let mut expected: Vec<&str> = before.lines().collect();
    after.sort_unstable();
    expected.sort_unstable();
    assert_eq!(after, expected);
    let report: Value = serde_json::from_str(&success(&["kv", "repair", db_str, "--json"])).unwrap();
    assert_eq!(report["repaired"], false, "{report}");
    let missing = dir.path().join("nothing");
    let error = failure(&["kv", "repair", missing.to_str().unwrap()]);
    assert!(error.contains("not a directory"), "{error}");
}

#[test]
fn the_examples_of_kv_load_help_run_as_written() {
    let help = success(&["kv", "load", "--help"]);
    let paragraph = help
        .split("\n\n")
        .find(|paragraph| paragraph.starts_with("Examples:"))
        .expect("an Examples paragraph");
    let examples: Vec<&str> = paragraph
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|example| example.starts_with("spillway "))
        .collect();
    assert!(examples.len() >= 2, "{help}");
    let dir = tempfile::tempdir().unwrap();
    for example in examples {
        // At a small scale: a thousand operations where it says a million.
        for command in example.replace("1M", "1000").split(" && ") {
            let words: Vec<&str> = command.split_whitespace().skip(1).collect();
            let output = std::process::Command::new(env!("CARGO_BIN_EXE_spillway"))
                .args(&words)
                .current_dir(dir.path())
                .output()
                .unwrap();
            assert!(
                output.status.success(),
                "`{command}` from `kv load --help` failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
    }
}
