"""``spillway agg`` on Parquet (python/spillway/agg_files.py): results against a direct computation, every output
format, and clear errors."""

import collections
import os
import subprocess
import sys

import numpy
import pyarrow
import pyarrow.csv
import pyarrow.parquet
import pytest


def spillway(*arguments, cwd=None):
    return subprocess.run([sys.executable, "-m", "spillway", "agg", *map(str, arguments)], capture_output=True,
                          text=True, cwd=cwd)


@pytest.fixture
def sales(tmp_path):
    rng = numpy.random.default_rng(5)
    rows = 50_000
    table = pyarrow.table({
        "region": pyarrow.array([f"r{index}" for index in rng.integers(0, 6, rows)]),
        "store": rng.integers(0, 40, rows),
        "units": rng.integers(-5, 100, rows),
        "price": rng.random(rows) * 10,
    })
    path = tmp_path / "sales.parquet"
    pyarrow.parquet.write_table(table, path, row_group_size=7_000)
    return path, table.to_pydict()


def test_groups_a_parquet_file_by_several_columns_into_parquet_and_csv(sales, tmp_path):
    path, data = sales
    expected = collections.defaultdict(lambda: [0, 0.0, 0])
    for region, store, units, price in zip(data["region"], data["store"], data["units"], data["price"]):
        entry = expected[(region, store)]
        entry[0] += units
        entry[1] += price
        entry[2] += 1
    output = tmp_path / "totals.parquet"
    run = spillway(path, "--key", "region,2", "--value", "units,price", "-f", "sum+mean", "--engine", "hash",
                   "-o", output)
    assert run.returncode == 0, run.stderr
    assert f"50000 records, {len(expected)} keys" in run.stderr
    table = pyarrow.parquet.read_table(output)
    assert table.column_names == ["region", "store", "sum", "mean"]
    got = {(row["region"], row["store"]): row for row in table.to_pylist()}
    assert got.keys() == expected.keys()
    for key, (units, prices, count) in expected.items():
        assert got[key]["sum"] == units and got[key]["mean"] == pytest.approx(prices / count, rel=1e-12)
    assert not [name for name in os.listdir(tmp_path) if "partial" in name]
    # CSV with a header, and counting (no --value) on the CBT by one key.
    csv_output = tmp_path / "counts.csv"
    run = spillway(path, "--key", "region", "-o", csv_output)
    assert run.returncode == 0, run.stderr
    counts = pyarrow.csv.read_csv(csv_output).to_pylist()
    assert {row["region"]: row["count"] for row in counts} == dict(collections.Counter(data["region"]))
    # Tab-separated lines on standard output.
    run = spillway(path, "--key", "store", "--value", "units", "-f", "max", "--engine", "hash")
    assert run.returncode == 0, run.stderr
    lines = dict(line.split("\t") for line in run.stdout.splitlines())
    assert len(lines) == 40 and int(lines["0"]) == max(
        units for store, units in zip(data["store"], data["units"]) if store == 0)


def test_parquet_errors_are_clear(sales, tmp_path):
    path, _ = sales
    for arguments, message in [
        (["--key", "nowhere", "-f", "count"], "--key nowhere: no such column; the file has region, store"),
        (["--key", "9"], "--key 9: the file has columns 1 to 4"),
        (["--key", "1", "-f", "sum"], "--value N is needed for sum"),
        (["--key", "1,2", "--value", "3", "-f", "sum"], "takes engine='hash'"),
        (["-o", tmp_path / "missing" / "x.parquet"], "does not exist"),
        (["--json"], "--json prints the report to standard output"),
    ]:
        run = spillway(path, *arguments)
        assert run.returncode == 1, (arguments, run.stderr)
        assert message in run.stderr, (arguments, run.stderr)
    not_parquet = tmp_path / "text.parquet"
    not_parquet.write_text("region,units\n")
    run = spillway(not_parquet)
    assert run.returncode == 1 and "not a Parquet file that can be read" in run.stderr, run.stderr
