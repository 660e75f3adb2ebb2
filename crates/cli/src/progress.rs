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
