#!/usr/bin/env bash
# Builds Spillway in release mode and installs the Python package and the
# `spillway` command into ./.venv (created if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
# matplotlib: bench/ charts; numpy, pyarrow, pandas and polars: the
# aggregator's column tests
.venv/bin/python -m pip install --quiet maturin pytest matplotlib numpy pyarrow pandas polars
# [cluster]: Ray, for spillway.cluster
.venv/bin/python -m pip install --quiet ".[cluster]"
.venv/bin/spillway --version
