#!/usr/bin/env python3
"""Drive the group-by aggregation workload's Python peers (DuckDB, Polars) and Spillway's Python API.

    agg_peers.py to-parquet DIR
    agg_peers.py duckdb DIR [--memory 16GB]
    agg_peers.py polars DIR
    agg_peers.py spillway DIR --engine hash|cbt

DIR holds a generated aggregation input:

    meta.json    {"shape": "int" | "bytes", "records": N, "keys": K, ...}
    values.i64   N little-endian int64 values
    keys.u64     (shape "int") N little-endian uint64 keys, all below 2**63
    keys.off     (shape "bytes") N + 1 little-endian uint64 offsets into keys.dat, 0 first,
                 keys.dat's size last
    keys.dat     (shape "bytes") the key bytes; key i is keys.dat[off[i]:off[i + 1]]

`to-parquet` converts it to DIR/data.parquet, the peers' input: columns `key` (int64 for "int",
large_binary for "bytes") and `value` (int64), row groups of 1,000,000 rows, uncompressed and
without dictionary encoding (plain pages), so that the engines neither decompress nor get the
keys pre-grouped by a dictionary. It works a row group at a time, so its memory stays small.

`duckdb` and `polars` compute, per distinct key, sum(value) and count(*), and print one JSON line:

    {"engine": NAME, "groups": G, "sum_of_sums": S, "sum_of_counts": C, "count_squares": Q,
     "sum_squares": R, "load_s": 0.0, "aggregate_s": A}

where Q and R are the sums over groups of count**2 and sum**2 in wrapping unsigned 64-bit
arithmetic (the sum taken as unsigned 64-bit), the same fields as every driver of the benchmark
prints, so their results can be cross-checked.

`spillway` does the same through `spillway.Aggregator("sum+count")` (integer keys only): it reads
the raw columns in chunks of 1,000,000 records as NumPy arrays, hands each to `insert_batch`, and
reads the result with `to_arrow()`, as a Python user of the package would. aggregate_s covers all
of it, reading included.

Fairness: both engines run with 2 threads, like the native drivers, and stream their input from
the Parquet file (DuckDB's read_parquet, Polars' scan_parquet with the streaming engine) rather
than from a table loaded beforehand. aggregate_s is the wall-clock time of the query, reading the
Parquet file included, up to the result being materialized as an Arrow table (DuckDB) or a
DataFrame (Polars); load_s is therefore 0. The untimed part is only turning the result into the
summary fields. Polars' thread count is fixed by POLARS_MAX_THREADS, which it reads when it is
imported, so this script sets it in os.environ before importing polars.

The peers are the libraries installed from PyPI (`duckdb`, `polars`, `pyarrow`, `numpy`); this
file only calls their public APIs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Polars sizes its thread pool from this variable when it is first imported; set it before any
# import of polars (which happens only inside polars_aggregate below).
THREADS = 2
os.environ["POLARS_MAX_THREADS"] = str(THREADS)

import numpy as np  # noqa: E402

ROW_GROUP = 1_000_000
PARQUET_NAME = "data.parquet"


class InputError(Exception):
    """The input directory is missing a file or its files do not agree with meta.json."""


@dataclass(frozen=True)
class Meta:
    shape: str
    records: int


def read_meta(directory: Path) -> Meta:
    path = directory / "meta.json"
    try:
        meta = json.loads(path.read_text())
    except OSError as error:
        raise InputError(f"{path}: cannot read: {error.strerror}") from error
    except json.JSONDecodeError as error:
        raise InputError(f"{path}: not valid JSON: {error}") from error
    shape = meta.get("shape")
    if shape not in ("int", "bytes"):
        raise InputError(f"{path}: unknown shape {shape!r} (expected 'int' or 'bytes')")
    records = meta.get("records")
    if not isinstance(records, int) or isinstance(records, bool) or records < 0:
        raise InputError(f"{path}: 'records' is not a non-negative integer: {records!r}")
    return Meta(shape, records)


def file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError as error:
        raise InputError(f"{path}: cannot stat: {error.strerror}") from error


def expect_size(path: Path, expected: int, what: str, records: int) -> None:
    size = file_size(path)
    if size != expected:
        raise InputError(f"{path}: {size} bytes, expected {expected} ({what} for {records} records in meta.json)")


def read_u64(path: Path, first: int, count: int) -> np.ndarray:
    """`count` little-endian uint64 values starting at index `first`."""
    values = np.fromfile(path, dtype="<u8", count=count, offset=first * 8)
    if len(values) != count:
        raise InputError(f"{path}: unexpected end of file")
    return values


def to_parquet(directory: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    started = time.perf_counter()
    meta = read_meta(directory)
    n = meta.records
    values_path = directory / "values.i64"
    expect_size(values_path, n * 8, "8 bytes per value", n)
    if meta.shape == "int":
        keys_path = directory / "keys.u64"
        expect_size(keys_path, n * 8, "8 bytes per key", n)
        key_type = pa.int64()
    else:
        offsets_path = directory / "keys.off"
        data_path = directory / "keys.dat"
        expect_size(offsets_path, (n + 1) * 8, "8 bytes per offset, one more than the records", n)
        if int(read_u64(offsets_path, 0, 1)[0]) != 0:
            raise InputError(f"{offsets_path}: the first offset is not 0")
        last, data_size = int(read_u64(offsets_path, n, 1)[0]), file_size(data_path)
        if last != data_size:
            raise InputError(f"{offsets_path}: the last offset is {last} but {data_path} has {data_size} bytes")
        key_type = pa.large_binary()
    schema = pa.schema([pa.field("key", key_type, nullable=False), pa.field("value", pa.int64(), nullable=False)])

    target = directory / PARQUET_NAME
    partial = directory / (PARQUET_NAME + ".partial")
    with pq.ParquetWriter(partial, schema, compression="none", use_dictionary=False) as writer:
        for first in range(0, n, ROW_GROUP):
            rows = min(ROW_GROUP, n - first)
            values = np.fromfile(values_path, dtype="<i8", count=rows, offset=first * 8)
            if len(values) != rows:
                raise InputError(f"{values_path}: unexpected end of file")
            if meta.shape == "int":
                keys = read_u64(keys_path, first, rows)
                if rows and int(keys.max()) >= 1 << 63:
                    raise InputError(f"{keys_path}: a key in rows {first}..{first + rows} is not below 2**63")
                key_array = pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(keys.view("<i8"))])
            else:
                bounds = read_u64(offsets_path, first, rows + 1)
                if np.any(bounds[1:] < bounds[:-1]):
                    raise InputError(f"{offsets_path}: offsets decrease in rows {first}..{first + rows}")
                start, length = int(bounds[0]), int(bounds[-1] - bounds[0])
                data = np.fromfile(data_path, dtype=np.uint8, count=length, offset=start)
                if len(data) != length:
                    raise InputError(f"{data_path}: unexpected end of file")
                rebased = (bounds - bounds[0]).view("<i8")
                key_array = pa.Array.from_buffers(
                    pa.large_binary(), rows, [None, pa.py_buffer(rebased), pa.py_buffer(data)]
                )
            value_array = pa.Array.from_buffers(pa.int64(), rows, [None, pa.py_buffer(values)])
            writer.write_table(pa.Table.from_arrays([key_array, value_array], schema=schema), row_group_size=rows)
    os.replace(partial, target)
    elapsed = time.perf_counter() - started
    print(f"to-parquet: {target}, {n} rows, {elapsed:.3f} s", file=sys.stderr, flush=True)


def parquet_input(directory: Path) -> Path:
    path = directory / PARQUET_NAME
    if not path.is_file():
        raise InputError(f"{path}: no such file (run `agg_peers.py to-parquet {directory}` first)")
    return path


def summary(engine: str, sums: np.ndarray, counts: np.ndarray, aggregate_s: float) -> dict[str, Any]:
    """The benchmark's result fields from the per-group sums and counts (wrapping uint64 squares)."""
    sums = np.ascontiguousarray(sums, dtype=np.int64)
    counts = np.ascontiguousarray(counts, dtype=np.uint64)
    unsigned = sums.view(np.uint64)
    return {
        "engine": engine,
        "groups": len(sums),
        "sum_of_sums": int(sums.sum(dtype=np.int64)),
        "sum_of_counts": int(counts.sum(dtype=np.uint64)),
        "count_squares": int((counts * counts).sum(dtype=np.uint64)),
        "sum_squares": int((unsigned * unsigned).sum(dtype=np.uint64)),
        "load_s": 0.0,
        "aggregate_s": aggregate_s,
    }


def emit(result: dict[str, Any], meta: Meta) -> None:
    if result["sum_of_counts"] != meta.records:
        raise InputError(f"{result['engine']} counted {result['sum_of_counts']} rows, meta.json says {meta.records}")
    print(json.dumps(result), flush=True)


def duckdb_aggregate(directory: Path, memory: str) -> None:
    import duckdb
    import pyarrow as pa
    import pyarrow.compute as pc

    meta = read_meta(directory)
    source = str(parquet_input(directory)).replace("'", "''")
    connection = duckdb.connect(":memory:")
    connection.execute(f"SET threads = {THREADS}")
    limit = memory.replace("'", "''")
    connection.execute(f"SET memory_limit = '{limit}'")
    connection.execute("SET preserve_insertion_order = false")
    query = f"SELECT key, sum(value) AS s, count(*) AS c FROM read_parquet('{source}') GROUP BY key"

    started = time.perf_counter()
    relation = connection.sql(query)  # lazy: the query runs when its result is fetched
    # Recent DuckDB releases call it to_arrow_table; older ones return a Table from arrow().
    fetch = getattr(relation, "to_arrow_table", None) or relation.arrow
    table = fetch()
    aggregate_s = time.perf_counter() - started
    connection.close()

    # sum(BIGINT) is a HUGEINT in DuckDB, decimal128(38, 0) in Arrow; a checked cast brings it back
    # to int64 (it cannot overflow here: values are below 1000).
    sums = table.column("s")
    if not pa.types.is_int64(sums.type):
        sums = pc.cast(sums, pa.int64())
    emit(summary("duckdb", sums.to_numpy(), table.column("c").to_numpy(), aggregate_s), meta)


def polars_aggregate(directory: Path) -> None:
    import polars as pl

    meta = read_meta(directory)
    if pl.thread_pool_size() != THREADS:
        print(
            f"polars: thread pool has {pl.thread_pool_size()} threads, not {THREADS}", file=sys.stderr, flush=True
        )
    query = (
        pl.scan_parquet(parquet_input(directory))
        .group_by("key")
        .agg(pl.col("value").sum().alias("s"), pl.len().alias("c"))
    )

    started = time.perf_counter()
    try:
        frame = query.collect(engine="streaming")
    except TypeError:
        # Polars releases before the new streaming engine take `streaming=True` instead.
        frame = query.collect(streaming=True)
    aggregate_s = time.perf_counter() - started

    emit(summary("polars", frame["s"].to_numpy(), frame["c"].to_numpy(), aggregate_s), meta)


def spillway_aggregate(directory: Path, engine: str) -> None:
    import spillway

    meta = read_meta(directory)
    if meta.shape != "int":
        raise InputError(f"{directory}: the Python contender takes integer keys, not shape {meta.shape!r}")
    keys_path, values_path = directory / "keys.u64", directory / "values.i64"
    expect_size(keys_path, meta.records * 8, "8 bytes per key", meta.records)
    expect_size(values_path, meta.records * 8, "8 bytes per value", meta.records)

    started = time.perf_counter()
    aggregator = spillway.Aggregator("sum+count", engine=engine, memory="16G", threads=THREADS)
    for first in range(0, meta.records, ROW_GROUP):
        rows = min(ROW_GROUP, meta.records - first)
        keys = read_u64(keys_path, first, rows).view("<i8")  # every key is below 2**63
        values = np.fromfile(values_path, dtype="<i8", count=rows, offset=first * 8)
        aggregator.insert_batch(keys, values)
    aggregator.finalize()
    table = aggregator.to_arrow()
    aggregate_s = time.perf_counter() - started

    result = summary(f"spillway-{engine}", table.column("sum").to_numpy(), table.column("count").to_numpy(),
                     aggregate_s)
    result["stats"] = aggregator.stats()
    emit(result, meta)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    convert = commands.add_parser("to-parquet", help="write DIR/data.parquet from the binary input")
    convert.add_argument("dir", type=Path)
    duck = commands.add_parser("duckdb", help="GROUP BY with DuckDB over DIR/data.parquet")
    duck.add_argument("dir", type=Path)
    duck.add_argument("--memory", default="16GB", help="DuckDB memory_limit (default 16GB)")
    polars = commands.add_parser("polars", help="group_by with Polars' streaming engine over DIR/data.parquet")
    polars.add_argument("dir", type=Path)
    own = commands.add_parser("spillway", help="spillway.Aggregator over DIR's raw columns, as NumPy batches")
    own.add_argument("dir", type=Path)
    own.add_argument("--engine", choices=["hash", "cbt"], required=True)
    args = parser.parse_args()
    try:
        if args.command == "to-parquet":
            to_parquet(args.dir)
        elif args.command == "duckdb":
            duckdb_aggregate(args.dir, args.memory)
        elif args.command == "spillway":
            spillway_aggregate(args.dir, args.engine)
        else:
            polars_aggregate(args.dir)
    except InputError as error:
        print(f"agg_peers.py {args.command}: {error}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
