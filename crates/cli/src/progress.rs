//! Progress bars and throughput lines shared by the long-running subcommands.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A byte-counting progress bar on standard error, drawn only when standard
/// error is a terminal (so logs and pipes stay clean).
pub fn bar(total_bytes: u64, message: &'static str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::with_draw_target(Some(total_bytes), ProgressDrawTarget::hidden());
    }
    let bar = ProgressBar::new(total_bytes);
    bar.set_style(
        ProgressStyle::with_template(
            "{msg:>10} [{bar:40}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
        )
        .expect("the template is valid")
        .progress_chars("=> "),
    );
    bar.set_message(message);
    bar
}

/// A record-counting progress bar on standard error, drawn only when
/// standard error is a terminal, for work measured in records rather than
/// bytes (generated input).
pub fn records_bar(total_records: u64, message: &'static str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::with_draw_target(Some(total_records), ProgressDrawTarget::hidden());
    }
    let bar = ProgressBar::new(total_records);
    bar.set_style(
        ProgressStyle::with_template(
            "{msg:>10} [{bar:40}] {human_pos}/{human_len} records {per_sec} eta {eta}",
        )
        .expect("the template is valid")
        .progress_chars("=> "),
    );
    bar.set_message(message);
    bar
}

/// "1000000000 bytes in 0.81 s: 1234.5 MB/s".
pub fn throughput(bytes: u64, elapsed: Duration) -> String {
    let seconds = elapsed.as_secs_f64();
    let megabytes_per_second = if seconds > 0.0 {
        bytes as f64 / seconds / 1e6
    } else {
        f64::INFINITY
    };
    format!("{bytes} bytes in {seconds:.3} s: {megabytes_per_second:.1} MB/s")
}

/// The lines that say which files of runs killed outright (their owner
/// gone) were removed before this one began; empty when none were.
pub fn swept(files: &[std::path::PathBuf]) -> String {
    files
        .iter()
        .map(|file| format!("removed {}, left by a run that is gone\n", file.display()))
        .collect()
}

/// A progress bar per phase of a long job, for engines that report
/// `(phase, done, total)`: a phase's first report replaces the bar of the
/// phase before. [`PhaseBars::finish`] clears the last one.
#[derive(Debug, Clone, Default)]
pub struct PhaseBars {
    current: std::sync::Arc<std::sync::Mutex<Option<(String, ProgressBar)>>>,
}

impl PhaseBars {
    /// Shows `done` of `total` bytes for `phase`, labelled `label`.
    pub fn update(&self, label: &'static str, phase: &str, done: u64, total: u64) {
        let mut current = self.current.lock().unwrap();
        if current.as_ref().is_none_or(|(name, _)| name != phase) {
            if let Some((_, old)) = current.take() {
                old.finish_and_clear();
            }
            let bar = bar(total, label);
            bar.set_message(phase.to_owned());
            *current = Some((phase.to_owned(), bar));
        }
        if let Some((_, bar)) = current.as_ref() {
            bar.set_position(done);
        }
    }

    /// Clears the last bar.
    pub fn finish(&self) {
        if let Some((_, bar)) = self.current.lock().unwrap().take() {
            bar.finish_and_clear();
        }
    }
}
