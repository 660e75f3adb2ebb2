//! The `spillway` binary; everything is in the library.

fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(spillway_cli::main_with_args(std::env::args_os()))
}
