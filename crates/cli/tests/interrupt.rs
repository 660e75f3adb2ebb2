//! SIGINT and SIGTERM stop long commands: they remove their temporary
//! files and partial outputs and exit with 130 or 143.

mod common;

use std::time::Duration;

use common::{entries, interrupted, path_str, scratch_files, success};

/// Long enough a wait for a stopped command that it never fails a slow
/// machine; the time each took is printed for the record.
const EXIT_WITHIN: Duration = Duration::from_secs(5);

#[test]
fn a_sort_stopped_by_sigint_removes_its_partitions_and_exits_130() {
    let directory = tempfile::tempdir().unwrap();
    let input = directory.path().join("input.dat");
    let tmp = directory.path().join("tmp");
    success(&["gensort", "2000000", path_str(&input), "--no-sync"]);
    let output = directory.path().join("sorted.dat");
    let (result, after) = interrupted(
        &[
            "sort",
            path_str(&input),
            path_str(&output),
            "--memory",
            "16M",
            "--tmp",
            path_str(&tmp),
            "--no-sync",
        ],
        "INT",
        || !scratch_files(&tmp).is_empty(),
    );
    eprintln!("sort exited {after:?} after SIGINT");
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_eq!(result.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(after < EXIT_WITHIN, "{after:?}");
    assert!(scratch_files(&tmp).is_empty(), "{:?}", scratch_files(&tmp));
    assert_eq!(entries(directory.path()), vec!["input.dat", "tmp"]);
}

#[test]
fn gensort_stopped_by_sigterm_leaves_no_output_and_exits_143() {
    let directory = tempfile::tempdir().unwrap();
    let output = directory.path().join("input.dat");
    let (result, after) = interrupted(
        &["gensort", "50000000", path_str(&output), "--no-sync"],
        "TERM",
        || !scratch_files(directory.path()).is_empty(),
    );
    eprintln!("gensort exited {after:?} after SIGTERM");
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_eq!(result.status.code(), Some(143), "{stderr}");
    assert!(after < EXIT_WITHIN, "{after:?}");
    assert_eq!(entries(directory.path()), Vec::<String>::new());
}

#[test]
fn a_job_stopped_by_sigint_leaves_no_work_and_no_output() {
    let directory = tempfile::tempdir().unwrap();
    let text = directory.path().join("text.txt");
    success(&["gen", "text", "--bytes", "200M", "-o", path_str(&text)]);
    let output = directory.path().join("counts");
    let (result, after) = interrupted(
        &[
            "mr",
            "wordcount",
            path_str(&text),
            "-o",
            path_str(&output),
            "--memory",
            "64M",
            "--no-sync",
        ],
        "INT",
        || !scratch_files(directory.path()).is_empty(),
    );
    eprintln!("mr exited {after:?} after SIGINT");
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_eq!(result.status.code(), Some(130), "{stderr}");
    assert!(after < EXIT_WITHIN, "{after:?}");
    assert_eq!(entries(directory.path()), vec!["text.txt"]);
}

#[test]
fn a_generator_stopped_by_sigint_leaves_no_output() {
    let directory = tempfile::tempdir().unwrap();
    let text = directory.path().join("text.txt");
    let (result, after) = interrupted(
        &["gen", "text", "--bytes", "50G", "-o", path_str(&text)],
        "INT",
        || !scratch_files(directory.path()).is_empty(),
    );
    eprintln!("gen exited {after:?} after SIGINT");
    let stderr = String::from_utf8_lossy(&result.stderr);
    assert_eq!(result.status.code(), Some(130), "{stderr}");
    assert!(after < EXIT_WITHIN, "{after:?}");
    assert_eq!(entries(directory.path()), Vec::<String>::new());
}
