#!/usr/bin/env bash
# Builds Spillway in release mode and installs the Python package and the
# `spillway` command into ./.venv (created if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet maturin pytest matplotlib  # matplotlib: bench/ charts
.venv/bin/python -m pip install --quiet .
.venv/bin/spillway --version
