//! Running the `spillway` binary from the command-line tests.

#![allow(dead_code)] // each test file uses its own share of these

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs `spillway` with `arguments`.
pub fn spillway(arguments: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(arguments)
        .output()
        .expect("the spillway binary runs")
}

/// Runs a command that must succeed and returns its standard output.
pub fn success(arguments: &[&str]) -> String {
    let output = spillway(arguments);
    assert!(
        output.status.success(),
        "{arguments:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Runs a command that must fail with status 1 and returns its standard error.
pub fn failure(arguments: &[&str]) -> String {
    let output = spillway(arguments);
    assert_eq!(output.status.code(), Some(1), "{arguments:?} did not fail with 1");
    String::from_utf8(output.stderr).unwrap()
}

/// `path` as a command-line argument.
pub fn path_str(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Starts `spillway` with `arguments`, waits until `ready` holds (polling
/// every 10 ms, at most 60 s), sends it `signal` ("INT", "TERM") and
/// returns its output with the time it took to exit after the signal.
pub fn interrupted(arguments: &[&str], signal: &str, ready: impl Fn() -> bool) -> (Output, Duration) {
    let child = Command::new(env!("CARGO_BIN_EXE_spillway"))
        .args(arguments)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the spillway binary runs");
    let started = Instant::now();
    while !ready() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{arguments:?} never got ready"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let sent = Instant::now();
    let status = Command::new("kill")
        .args(["-s", signal, &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -s {signal} failed");
    let output = child.wait_with_output().expect("the command ends");
    (output, sent.elapsed())
}

/// The names in `directory` that start with "spillway-" (scratch files).
pub fn scratch_files(directory: &Path) -> Vec<String> {
    std::fs::read_dir(directory)
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok())
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .filter(|name| name.starts_with("spillway-"))
                .collect()
        })
        .unwrap_or_default()
}

/// The names in `directory`, sorted.
pub fn entries(directory: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(directory)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}
