//! `spillway gen`: files written, summaries reported, bad flags named.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

mod common;

use common::entries;

fn spillway(arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(arguments)
        .output()
        .expect("the spillway binary runs")
}

/// Runs a command that must succeed with `--json` and returns its summary.
fn summary(arguments: &[&str]) -> Value {
    let output = spillway(arguments);
    assert!(
        output.status.success(),
        "{arguments:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("--json prints one JSON object")
}

/// Runs a command that must fail and returns its standard error.
fn failure(arguments: &[&str]) -> String {
    let output = spillway(arguments);
    assert!(!output.status.success(), "{arguments:?} succeeded");
    String::from_utf8(output.stderr).unwrap()
}

fn stdout_of(arguments: &[&str]) -> Vec<u8> {
    let output = spillway(arguments);
    assert!(
        output.status.success(),
        "{arguments:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

fn path_str(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn kv_writes_text_operations_and_a_json_summary() {
    let directory = tempfile::tempdir().unwrap();
    let file = directory.path().join("ops.txt");
    let report = summary(&[
        "gen",
        "kv",
        "--preset",
        "fillseq",
        "--ops",
        "1K",
        "--key-bytes",
        "8",
        "--value-bytes",
        "10",
        "--json",
        "-o",
        path_str(&file),
    ]);
    assert_eq!(report["generator"], "kv");
    assert_eq!(report["records"], 1024);
    assert_eq!(report["puts"], 1024);
    assert_eq!(report["distinct_keys"], 1024);
    assert_eq!(report["seed"], 42);
    assert!(report["seconds"].as_f64().unwrap() >= 0.0);
    assert!(report["mb_per_s"].as_f64().is_some());
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(report["bytes"].as_u64().unwrap(), text.len() as u64);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1024);
    for (index, line) in lines.iter().enumerate() {
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(fields[0], "PUT");
        assert_eq!(fields[1], format!("{index:016x}"));
        assert_eq!(fields[2].len(), 20);
    }
}

#[test]
fn kv_binary_records_parse_and_mixes_apply() {
    let directory = tempfile::tempdir().unwrap();
    let file = directory.path().join("ops.bin");
    let report = summary(&[
        "gen",
        "kv",
        "--ops",
        "2000",
        "--keys",
        "100",
        "--distribution",
        "zipfian",
        "--zipf-s",
        "1.2",
        "--mix",
        "put=50,get=50",
        "--format",
        "binary",
        "--json",
        "-o",
        path_str(&file),
    ]);
    let data = std::fs::read(&file).unwrap();
    assert_eq!(report["bytes"].as_u64().unwrap(), data.len() as u64);
    let mut offset = 0;
    let mut kinds = [0u64; 4];
    let mut keys: HashMap<Vec<u8>, u64> = HashMap::new();
    while offset < data.len() {
        let kind = data[offset];
        let key_length = u32::from_le_bytes(data[offset + 1..offset + 5].try_into().unwrap()) as usize;
        let value_length = u32::from_le_bytes(data[offset + 5..offset + 9].try_into().unwrap()) as usize;
        assert_eq!(key_length, 16);
        assert_eq!(value_length, if kind == 0 { 100 } else { 0 });
        *keys
            .entry(data[offset + 9..offset + 9 + key_length].to_vec())
            .or_default() += 1;
        kinds[kind as usize] += 1;
        offset += 9 + key_length + value_length;
    }
    assert_eq!(offset, data.len());
    assert_eq!(kinds[0] + kinds[1], 2000);
    assert_eq!(kinds[0], report["puts"].as_u64().unwrap());
    assert!((800..1200).contains(&kinds[0]), "{kinds:?}");
    assert_eq!(keys.len() as u64, report["distinct_keys"].as_u64().unwrap());
    // Zipf 1.2 over 100 keys: the hottest key takes about 1/4 of the operations.
    let hottest = keys.values().max().unwrap();
    assert!(*hottest > 300, "hottest key used {hottest} times");
}

#[test]
fn same_seed_gives_the_same_bytes_and_another_seed_other_bytes() {
    let text = |seed: &str| stdout_of(&["gen", "text", "--bytes", "64K", "--seed", seed, "-o", "-"]);
    let first = text("7");
    assert_eq!(first, text("7"));
    assert_ne!(first, text("8"));
    // 64K = 65536 bytes, ending at the first line end at or after it.
    assert!(
        first.len() >= 65_536 && first.len() < 65_536 + 200,
        "{}",
        first.len()
    );
    assert_eq!(first.last(), Some(&b'\n'));
    let kv = |seed: &str| stdout_of(&["gen", "kv", "--ops", "500", "--seed", seed, "-o", "-"]);
    assert_eq!(kv("1"), kv("1"));
    assert_ne!(kv("1"), kv("2"));
}

#[test]
fn text_and_rmat_do_not_depend_on_the_thread_count() {
    let text = |threads: &str| stdout_of(&["gen", "text", "--bytes", "2M", "--threads", threads, "-o", "-"]);
    assert!(text("1") == text("2"), "text differs between 1 and 2 threads");
    let rmat = |threads: &str| {
        stdout_of(&[
            "gen",
            "rmat",
            "--scale",
            "12",
            "--edge-factor",
            "40",
            "--binary",
            "--threads",
            threads,
            "-o",
            "-",
        ])
    };
    let single = rmat("1");
    assert_eq!(single.len(), 16 * 40 * 4096);
    assert!(single == rmat("2"), "R-MAT edges differ between 1 and 2 threads");
}

#[test]
fn text_summary_and_word_counts_agree() {
    let directory = tempfile::tempdir().unwrap();
    let file = directory.path().join("words.txt");
    let report = summary(&[
        "gen",
        "text",
        "--lines",
        "5000",
        "--vocabulary",
        "1K",
        "--zipf-s",
        "1.0",
        "--words-per-line",
        "8",
        "--json",
        "-o",
        path_str(&file),
    ]);
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(report["records"], 5000);
    assert_eq!(report["words"], 40_000);
    let mut counts: HashMap<&str, u64> = HashMap::new();
    for word in text.split_whitespace() {
        *counts.entry(word).or_default() += 1;
    }
    assert_eq!(counts.len() as u64, report["distinct_words"].as_u64().unwrap());
    let mut ranked: Vec<u64> = counts.values().copied().collect();
    ranked.sort_unstable_by(|left, right| right.cmp(left));
    let ratio = ranked[0] as f64 / ranked[1] as f64;
    assert!((1.8..2.2).contains(&ratio), "rank-1 / rank-2 = {ratio}");
}

#[test]
fn rmat_text_edges_are_within_the_vertex_range() {
    let directory = tempfile::tempdir().unwrap();
    let file = directory.path().join("graph.tsv");
    let report = summary(&[
        "gen",
        "rmat",
        "--scale",
        "10",
        "--edge-factor",
        "4",
        "--json",
        "-o",
        path_str(&file),
    ]);
    assert_eq!(report["records"], 4096);
    assert_eq!(report["vertices"], 1024);
    let text = std::fs::read_to_string(&file).unwrap();
    let mut self_loops = 0;
    for line in text.lines() {
        let (source, destination) = line.split_once('\t').unwrap();
        let (source, destination): (u64, u64) = (source.parse().unwrap(), destination.parse().unwrap());
        assert!(source < 1024 && destination < 1024);
        self_loops += u64::from(source == destination);
    }
    assert_eq!(text.lines().count(), 4096);
    assert_eq!(report["self_loops"].as_u64().unwrap(), self_loops);
}

#[test]
fn clicks_report_the_sessions_an_independent_sessionizer_finds() {
    let directory = tempfile::tempdir().unwrap();
    let file = directory.path().join("clicks.tsv");
    let report = summary(&[
        "gen",
        "clicks",
        "--users",
        "500",
        "--clicks",
        "20K",
        "--session-timeout-ms",
        "300000",
        "--arrival-gap-ms",
        "20000",
        "--json",
        "-o",
        path_str(&file),
    ]);
    let text = std::fs::read_to_string(&file).unwrap();
    let mut last: HashMap<u64, u64> = HashMap::new();
    let mut sessions = 0u64;
    let mut previous_timestamp = 0;
    for line in text.lines() {
        let fields: Vec<&str> = line.split('\t').collect();
        assert_eq!(fields.len(), 3);
        let (user, timestamp): (u64, u64) = (fields[0].parse().unwrap(), fields[1].parse().unwrap());
        assert!(fields[2].starts_with('/'));
        assert!(timestamp >= previous_timestamp);
        previous_timestamp = timestamp;
        match last.insert(user, timestamp) {
            Some(before) if timestamp - before <= 300_000 => {}
            _ => sessions += 1,
        }
    }
    assert_eq!(report["records"], 20 * 1024);
    assert_eq!(report["sessions"].as_u64().unwrap(), sessions);
    assert_eq!(report["distinct_users"].as_u64().unwrap(), last.len() as u64);
    assert!(sessions > last.len() as u64);
}

#[test]
fn the_summary_line_goes_to_standard_error_without_json() {
    let directory = tempfile::tempdir().unwrap();
    let file = directory.path().join("edges.bin");
    let output = spillway(&["gen", "rmat", "--scale", "8", "--binary", "-o", path_str(&file)]);
    assert!(output.status.success());
    assert!(output.stdout.is_empty());
    let line = String::from_utf8(output.stderr).unwrap();
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(line.contains("4096 records, 65536 bytes in"), "{line}");
    assert!(line.contains("MB/s"), "{line}");
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 65_536);
}

#[test]
fn bad_flags_fail_with_a_message_naming_the_flag() {
    let cases: &[(&[&str], &[&str])] = &[
        (
            &[
                "gen",
                "kv",
                "--distribution",
                "zipfian",
                "--zipf-s",
                "-1",
                "-o",
                "-",
            ],
            &["--zipf-s", "must be > 0, got -1"],
        ),
        (
            &["gen", "kv", "--zipf-s", "0.9", "-o", "-"],
            &["--zipf-s applies to the zipfian distribution"],
        ),
        (
            &["gen", "kv", "--ops", "12X", "-o", "-"],
            &["--ops", "unknown suffix"],
        ),
        (
            &["gen", "kv", "--key-bytes", "2", "--keys", "70000", "-o", "-"],
            &["--keys 70000", "--key-bytes 2"],
        ),
        (
            &["gen", "kv", "--compression-ratio", "1.5", "-o", "-"],
            &["--compression-ratio", "must be in (0, 1], got 1.5"],
        ),
        (
            &["gen", "kv", "--mix", "put=50,get=40", "-o", "-"],
            &["--mix", "sum to 100, got 90"],
        ),
        (
            &["gen", "kv", "--preset", "fillsequential", "-o", "-"],
            &["--preset", "unknown preset"],
        ),
        (
            &["gen", "text", "--bytes", "1K", "--zipf-s", "0", "-o", "-"],
            &["--zipf-s", "must be > 0, got 0"],
        ),
        (
            &["gen", "text", "--bytes", "1K", "--vocabulary", "0", "-o", "-"],
            &["--vocabulary must be in"],
        ),
        (&["gen", "text", "-o", "-"], &["--bytes", "--lines"]),
        (
            &["gen", "rmat", "--a", "0.6", "--b", "0.3", "-o", "-"],
            &["--a + --b + --c must be at most 1"],
        ),
        (
            &["gen", "rmat", "--c", "-0.1", "-o", "-"],
            &["--c", "must be in [0, 1], got -0.1"],
        ),
        (&["gen", "rmat", "--scale", "0", "-o", "-"], &["--scale"]),
        (
            &["gen", "clicks", "--users", "0", "-o", "-"],
            &["--users must be at least 1, got 0"],
        ),
        (
            &["gen", "clicks", "--clicks-per-session", "0.5", "-o", "-"],
            &["--clicks-per-session", "must be >= 1"],
        ),
        (&["gen", "clicks", "--json", "-o", "-"], &["--json needs -o FILE"]),
        // Checked by the library's validate(), named by the CLI's flag table.
        (
            &[
                "gen",
                "kv",
                "--distribution",
                "zipfian",
                "--keys",
                "16384T",
                "-o",
                "-",
            ],
            &["--keys must be at most 2^53 for a zipfian distribution, got 18014398509481984"],
        ),
        (
            &["gen", "kv", "--key-bytes", "0", "-o", "-"],
            &["--key-bytes must be in 1..=65536, got 0"],
        ),
        (
            &["gen", "kv", "--value-bytes", "1G", "-o", "-"],
            &["--value-bytes must be at most 67108864, got 1073741824"],
        ),
        (
            &["gen", "text", "--lines", "1", "--words-per-line", "0", "-o", "-"],
            &["--words-per-line must be in 1..=65536, got 0"],
        ),
        (
            &["gen", "rmat", "--edge-factor", "0", "-o", "-"],
            &["--edge-factor must be at least 1, got 0"],
        ),
        (
            &["gen", "rmat", "--scale", "49", "-o", "-"],
            &["--scale must be in 1..=48, got 49"],
        ),
        (
            &["gen", "clicks", "--users", "16384T", "-o", "-"],
            &["--users must be at most 2^53"],
        ),
        (
            &["gen", "clicks", "--urls", "0", "-o", "-"],
            &["--urls must be in 1..="],
        ),
        (
            &["gen", "clicks", "--url-zipf-s", "-1", "-o", "-"],
            &["--url-zipf-s must be > 0, got -1"],
        ),
        (
            &["gen", "clicks", "--arrival-gap-ms", "0", "-o", "-"],
            &["--arrival-gap-ms must be > 0, got 0"],
        ),
        (
            &["gen", "clicks", "--session-timeout-ms", "0", "-o", "-"],
            &["--session-timeout-ms must be at least 1, got 0"],
        ),
        (
            &["gen", "clicks", "--start-ms", "18446744073709551615", "-o", "-"],
            &["--start-ms must be at most 2^62"],
        ),
    ];
    for (arguments, wanted) in cases {
        let message = failure(arguments);
        for fragment in *wanted {
            assert!(
                message.contains(fragment),
                "{arguments:?}: {message:?} does not contain {fragment:?}"
            );
        }
    }
}

#[test]
fn an_unwritable_output_names_the_file() {
    let message = failure(&[
        "gen",
        "text",
        "--lines",
        "1",
        "-o",
        "/nonexistent-directory/words.txt",
    ]);
    assert!(message.contains("/nonexistent-directory/words.txt"), "{message}");
}

#[test]
fn a_failed_run_leaves_an_existing_output_untouched() {
    let directory = tempfile::tempdir().unwrap();
    let file = directory.path().join("keep.txt");
    std::fs::write(&file, "precious\n").unwrap();
    let cases: &[(&[&str], &str)] = &[
        // A bad parameter: used to truncate keep.txt, then fail.
        (
            &["gen", "kv", "--distribution", "zipfian", "--keys", "16384T"],
            "--keys must be at most 2^53",
        ),
        (
            &["gen", "text", "--bytes", "1K", "--zipf-s", "0"],
            "--zipf-s must be > 0",
        ),
        // Fails while writing (the second arrival is past u64::MAX): used to
        // panic on the overflow after truncating keep.txt.
        (
            &[
                "gen",
                "clicks",
                "--users",
                "1",
                "--clicks",
                "10",
                "--clicks-per-session",
                "1",
                "--arrival-gap-ms",
                "1e300",
                "--start-ms",
                "4611686018427387904",
            ],
            "click timestamps pass 2^64 ms after 1 clicks: --start-ms 4611686018427387904",
        ),
    ];
    for (arguments, wanted) in cases {
        let mut arguments = arguments.to_vec();
        arguments.extend(["-o", path_str(&file)]);
        let message = failure(&arguments);
        assert!(message.contains(wanted), "{arguments:?}: {message}");
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "precious\n",
            "{arguments:?}"
        );
        assert_eq!(entries(directory.path()), ["keep.txt"], "{arguments:?}");
    }
}

#[test]
fn a_successful_run_replaces_the_output_and_leaves_no_partial_file() {
    let directory = tempfile::tempdir().unwrap();
    let file = directory.path().join("words.txt");
    std::fs::write(&file, "x".repeat(100_000)).unwrap();
    // A partial file left by a run killed outright names its process
    // (process ids this high never run): it is swept, and the run says so.
    let stale = directory.path().join("spillway-partial.p4294967294s1.words.txt");
    std::fs::write(&stale, "stale").unwrap();
    let output = spillway(&["gen", "text", "--lines", "3", "--json", "-o", path_str(&file)]);
    assert!(output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "removed {}, left by a run that is gone",
            stale.display()
        )),
        "{stderr}"
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(text.lines().count(), 3);
    assert_eq!(report["bytes"].as_u64().unwrap(), text.len() as u64);
    assert_eq!(report["output"], path_str(&file));
    assert_eq!(entries(directory.path()), ["words.txt"]);
    assert_eq!(
        text.as_bytes(),
        stdout_of(&["gen", "text", "--lines", "3", "-o", "-"])
    );
}

#[cfg(unix)]
#[test]
fn devices_are_written_in_place_and_links_stay_links() {
    use std::os::unix::fs::FileTypeExt;
    // Renaming a file over /dev/null would replace the device (as root) or
    // fail (as anyone else): it is written in place.
    let output = spillway(&["gen", "text", "--lines", "100", "-o", "/dev/null"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(std::fs::metadata("/dev/null")
        .unwrap()
        .file_type()
        .is_char_device());
    assert!(!Path::new("/dev/null.partial").exists());
    // A link to a file: the file gets the data, the link stays.
    let directory = tempfile::tempdir().unwrap();
    let target = directory.path().join("target.txt");
    let link = directory.path().join("link.txt");
    std::fs::write(&target, "old").unwrap();
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let output = spillway(&["gen", "text", "--lines", "2", "-o", path_str(&link)]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read_to_string(&target).unwrap().lines().count(), 2);
    assert_eq!(entries(directory.path()), ["link.txt", "target.txt"]);
}

#[test]
fn thread_requests_are_capped() {
    // usize::MAX threads used to abort on a capacity overflow, a million
    // took 25 s to start; both are capped at the blocks to build (here 1).
    let single = stdout_of(&["gen", "text", "--lines", "10", "--threads", "1", "-o", "-"]);
    for threads in ["18446744073709551615", "1000000", "0"] {
        let text = stdout_of(&["gen", "text", "--lines", "10", "--threads", threads, "-o", "-"]);
        assert_eq!(text, single, "--threads {threads}");
        let edges = stdout_of(&["gen", "rmat", "--scale", "4", "--threads", threads, "-o", "-"]);
        assert_eq!(
            edges,
            stdout_of(&["gen", "rmat", "--scale", "4", "--threads", "1", "-o", "-"])
        );
    }
}
