//! `spillway gensort` and `spillway valsort` as a user runs them: arguments,
//! report text on standard error, exit status, summary files.

use std::path::Path;
use std::process::{Command, Output};

fn spillway(arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(arguments)
        .output()
        .unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn path(directory: &Path, name: &str) -> String {
    directory.join(name).to_str().unwrap().to_owned()
}

/// Sorts a file of 100-byte records by their 10-byte keys, in memory.
fn sort_records(from: &str, to: &str) {
    let data = std::fs::read(from).unwrap();
    let mut records: Vec<&[u8]> = data.chunks_exact(100).collect();
    records.sort_by(|left, right| left[..10].cmp(&right[..10]));
    std::fs::write(to, records.concat()).unwrap();
}

#[test]
fn gensort_prints_the_checksum_like_gensort() {
    let directory = tempfile::tempdir().unwrap();
    let out = spillway(&["gensort", "-c", "1000", &path(directory.path(), "a.dat")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "1ea6370b955\n");
    let ascii = spillway(&["gensort", "-a", "-c", "1000", &path(directory.path(), "b.dat")]);
    assert_eq!(stderr(&ascii), "1f5dfb3631a\n");
    // Without -c nothing is printed.
    let quiet = spillway(&["gensort", "10", &path(directory.path(), "c.dat")]);
    assert!(quiet.status.success() && quiet.stderr.is_empty() && quiet.stdout.is_empty());
}

#[test]
fn valsort_reports_like_valsort_and_sets_the_exit_status() {
    let directory = tempfile::tempdir().unwrap();
    let input = path(directory.path(), "input.dat");
    let sorted = path(directory.path(), "sorted.dat");
    assert!(spillway(&["gensort", "5000", &input]).status.success());

    let unsorted = spillway(&["valsort", &input]);
    assert_eq!(unsorted.status.code(), Some(1));
    let text = stderr(&unsorted);
    assert!(text.starts_with("First unordered record is record "), "{text}");
    assert!(
        text.contains("Records: 5000\n") && text.contains("ERROR - there are "),
        "{text}"
    );

    sort_records(&input, &sorted);
    let ok = spillway(&["valsort", &sorted]);
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
    let checksum = spillway(&["gensort", "-c", "5000", &path(directory.path(), "again.dat")]);
    let expected = format!(
        "Records: 5000\nChecksum: {}Duplicate keys: 0\nSUCCESS - all records are in order\n",
        stderr(&checksum)
    );
    assert_eq!(stderr(&ok), expected);

    let quiet = spillway(&["valsort", "-q", &input]);
    assert_eq!(quiet.status.code(), Some(1));
    assert!(quiet.stderr.is_empty());

    let json = spillway(&["valsort", "-q", "--json", &sorted]);
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(report["sorted"], true);
    assert_eq!(report["records"], "5000");
}

#[test]
fn partition_summaries_validate_a_partitioned_output() {
    let directory = tempfile::tempdir().unwrap();
    let whole = path(directory.path(), "whole.dat");
    assert!(spillway(&["gensort", "3000", &whole]).status.success());
    let sorted = path(directory.path(), "sorted.dat");
    sort_records(&whole, &sorted);
    // Split the sorted output into three partitions and summarize each.
    let data = std::fs::read(&sorted).unwrap();
    let mut summaries = Vec::new();
    for (index, part) in data.chunks(1000 * 100).enumerate() {
        let part_path = path(directory.path(), &format!("out{index}.dat"));
        let summary_path = path(directory.path(), &format!("out{index}.sum"));
        std::fs::write(&part_path, part).unwrap();
        let out = spillway(&["valsort", "-q", "-o", &summary_path, &part_path]);
        assert!(out.status.success());
        summaries.extend(std::fs::read(&summary_path).unwrap());
    }
    assert_eq!(summaries.len(), 3 * 280);
    let all = path(directory.path(), "all.sum");
    std::fs::write(&all, &summaries).unwrap();
    let combined = spillway(&["valsort", "-s", &all]);
    assert_eq!(stderr(&combined), stderr(&spillway(&["valsort", &sorted])));
    assert!(combined.status.success());

    // Partitions concatenated in the wrong order are caught from the summaries.
    let swapped = [&summaries[280..560], &summaries[..280], &summaries[560..]].concat();
    std::fs::write(&all, swapped).unwrap();
    let wrong = spillway(&["valsort", "-s", &all]);
    assert_eq!(wrong.status.code(), Some(1));
    assert!(
        stderr(&wrong).contains("First unordered record is record 1000\n"),
        "{}",
        stderr(&wrong)
    );
}

#[test]
fn bad_input_and_impossible_options_get_clear_errors() {
    let directory = tempfile::tempdir().unwrap();
    let partial = path(directory.path(), "partial.dat");
    std::fs::write(&partial, vec![b'x'; 150]).unwrap();
    let out = spillway(&["valsort", &partial]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("partial.dat") && stderr(&out).contains("150 bytes"),
        "{}",
        stderr(&out)
    );

    let missing = spillway(&["valsort", &path(directory.path(), "missing.dat")]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(stderr(&missing).contains("missing.dat"), "{}", stderr(&missing));
    // The operating system's reason appears once.
    assert_eq!(
        stderr(&missing).matches("No such file or directory").count(),
        1,
        "{}",
        stderr(&missing)
    );

    let unwritable = spillway(&["gensort", "10", "/nonexistent-directory/x.dat"]);
    assert_eq!(unwritable.status.code(), Some(1));
    assert!(stderr(&unwritable).contains("/nonexistent-directory/x.dat"));

    let too_many = spillway(&[
        "gensort",
        "18446744073709551615",
        &path(directory.path(), "big.dat"),
    ]);
    assert_eq!(too_many.status.code(), Some(1));
    assert!(stderr(&too_many).contains("records"), "{}", stderr(&too_many));

    for arguments in [
        &["gensort", "-bx", "10", "f"][..],
        &["gensort", "ten", "f"],
        &["gensort", "10"],
        &["valsort", "-t", "-1", "f"],
    ] {
        let out = spillway(arguments);
        assert_eq!(out.status.code(), Some(2), "{arguments:?}");
        assert!(stderr(&out).contains("error:"), "{arguments:?}: {}", stderr(&out));
    }
}

#[test]
fn sort_then_valsort_from_the_command_line() {
    let directory = tempfile::tempdir().unwrap();
    let input = path(directory.path(), "in.dat");
    let output = path(directory.path(), "out.dat");
    let generated = spillway(&["gensort", "-a", "-c", "20000", &input]);
    let sorted = spillway(&["sort", &input, &output, "--memory", "1M", "--ascii"]);
    assert!(sorted.status.success(), "{}", stderr(&sorted));
    let report = stderr(&sorted);
    assert!(
        report.contains("two passes") && report.contains("read 2.00, written 2.00"),
        "{report}"
    );
    for stage in ["reader", "distributor", "sorter", "writer", "bottleneck"] {
        assert!(report.contains(stage), "{stage} missing from {report}");
    }
    let check = spillway(&["valsort", &output]);
    assert!(check.status.success());
    assert!(
        stderr(&check).contains(&format!("Checksum: {}", stderr(&generated))),
        "{}",
        stderr(&check)
    );

    let json = spillway(&["sort", &input, &output, "--memory", "64M", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(report["mode"], "in_memory");
    assert_eq!(report["records"], 20000);

    let bad = spillway(&["sort", &input, &output, "--memory", "12Q"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("--memory"), "{}", stderr(&bad));
}

#[test]
fn partitioned_sort_validates_with_valsort_s() {
    let directory = tempfile::tempdir().unwrap();
    let input = path(directory.path(), "in.dat");
    let output = path(directory.path(), "out");
    let generated = spillway(&["gensort", "-s", "-c", "20000", &input]);
    let sorted = spillway(&["sort", &input, &output, "--memory", "1M", "--partitioned"]);
    assert!(sorted.status.success(), "{}", stderr(&sorted));
    assert!(
        stderr(&sorted).contains("partition files with summaries"),
        "{}",
        stderr(&sorted)
    );
    let all = path(directory.path(), "out/all.sum");
    let check = spillway(&["valsort", "-s", &all]);
    assert!(check.status.success(), "{}", stderr(&check));
    assert!(stderr(&check).contains(&format!("Checksum: {}", stderr(&generated))));
}
