//! Running the `spillway` binary from the command-line tests.

#![allow(dead_code)] // each test file uses its own share of these

use std::path::Path;
use std::process::{Command, Output};

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
