#!/usr/bin/env bash
# The whole test suite, as on a fresh machine: formatting, lints, Rust tests,
# the Python package built and installed in release mode, and its tests.
# Installs what it needs (rustfmt/clippy components, a virtualenv with
# maturin and pytest) itself.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TERM_COLOR=never
section() { printf '\n==> %s\n' "$*"; }

section "toolchain"
if command -v rustup >/dev/null; then
    rustup component add rustfmt clippy >/dev/null 2>&1 || true
fi
cargo --version

section "cargo fmt --check"
cargo fmt --all -- --check

section "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

section "cargo test"
cargo test --workspace --locked

section "python package (pip install . builds the Rust code in release mode)"
scripts/install.sh

section "pytest (tests/python and the benchmark runner's self-test)"
if [ ! -x /usr/bin/time ]; then  # bench/ measures peak RSS with GNU time
    apt-get update -q && apt-get install -y -q time
fi
.venv/bin/python -m pytest

section "pytest: the cluster tests (Ray), inside a loopback-only network namespace"
SPILLWAY_CLUSTER_TESTS=required unshare --net sh -c 'ip link set lo up && exec "$@"' sh \
    .venv/bin/python -m pytest tests/python/cluster
