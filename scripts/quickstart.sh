#!/usr/bin/env bash
# Installs Spillway and runs its main job on generated data: 1 GB of gensort
# records generated on all cores, sorted with the 2-IO external sort (here
# in memory: the input fits the 4 GB budget; pass a smaller SPILLWAY_MEMORY,
# e.g. 256M, to see two passes through temporary partitions), and validated
# with valsort against the input's checksum. Each step prints its
# throughput; the sort prints its stage tables.
# Data goes to $SPILLWAY_DATA (default: a temporary directory beside the
# checkout, on the same disk) and is removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
data_dir=${SPILLWAY_DATA:-$(mktemp -d "$(dirname "$PWD")/spillway-quickstart.XXXXXX")}
trap 'rm -rf "$data_dir"' EXIT
records=${SPILLWAY_RECORDS:-10000000}  # 10^7 records of 100 bytes = 1 GB
memory=${SPILLWAY_MEMORY:-4G}
spillway=.venv/bin/spillway

echo "== generate $records records (gensort 1.5 format)"
generated=$("$spillway" gensort --json --stats "$records" "$data_dir/input.dat")
checksum=$(printf '%s' "$generated" | .venv/bin/python -c 'import json, sys; print(json.load(sys.stdin)["checksum"])')
echo "input checksum $checksum"

echo "== sort with a $memory memory budget"
"$spillway" sort "$data_dir/input.dat" "$data_dir/sorted.dat" --memory "$memory" --tmp "$data_dir"

echo "== validate"
"$spillway" valsort --stats "$data_dir/sorted.dat" 2>&1 | tee "$data_dir/valsort.txt"
if ! grep -q "^Checksum: $checksum\$" "$data_dir/valsort.txt"; then
    echo "FAILED: the sorted output's checksum differs from the input's" >&2
    exit 1
fi
echo "OK: sorted, every record kept (checksum $checksum)"
