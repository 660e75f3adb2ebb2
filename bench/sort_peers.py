#!/usr/bin/env python3
"""Drive the sort workload's Python peers (DuckDB, Polars) and check their outputs.

    sort_peers.py to-parquet INPUT.bin OUTPUT.parquet
    sort_peers.py duckdb INPUT.parquet OUTPUT.parquet --memory 4GB --threads 2 --tmp DIR
    sort_peers.py polars INPUT.parquet OUTPUT.parquet
    sort_peers.py to-records INPUT.parquet OUTPUT.bin [--records N]

Records are gensort's 100-byte records; in Parquet they are two columns, `key`
(the first 10 bytes) and `payload` (the other 90), both binary, uncompressed
(gensort data is random and does not compress), no dictionary encoding.

Every writer makes its output durable before it exits (fdatasync of the file and
of its directory), like `spillway sort` does, so every engine's clock includes
writing its output to the device. `to-records` turns a sorted Parquet file back
into 100-byte records, in file order, so that `spillway valsort` can check the
order and the checksum of a peer's output (an untimed validation step).

The peers are the libraries installed from PyPI (`duckdb`, `polars`, `pyarrow`);
this file only calls their public APIs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

RECORD_BYTES = 100
KEY_BYTES = 10
CHUNK_RECORDS = 1 << 20  # one Parquet row group, ~100 MB


def durable(path: Path) -> None:
    """fdatasync the file and its directory (the directory holds the new entry)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
    finally:
        os.close(fd)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def report(what: str, started: float, records: int | None = None) -> None:
    elapsed = time.perf_counter() - started
    tail = f", {records} records" if records is not None else ""
    print(f"{what}: {elapsed:.3f} s{tail}", file=sys.stderr, flush=True)


def to_parquet(source: Path, target: Path) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    started = time.perf_counter()
    size = source.stat().st_size
    if size % RECORD_BYTES:
        raise SystemExit(f"{source}: {size} bytes is not a whole number of {RECORD_BYTES}-byte records")
    schema = pa.schema([("key", pa.binary(KEY_BYTES)), ("payload", pa.binary(RECORD_BYTES - KEY_BYTES))])
    records = 0
    with open(source, "rb", buffering=0) as reader, pq.ParquetWriter(
        target, schema, compression="none", use_dictionary=False, write_statistics=["key"]
    ) as writer:
        buffer = bytearray(CHUNK_RECORDS * RECORD_BYTES)
        view = memoryview(buffer)
        while True:
            filled = 0
            while filled < len(buffer):
                count = reader.readinto(view[filled:])
                if not count:
                    break
                filled += count
            if filled == 0:
                break
            rows = filled // RECORD_BYTES
            table = np.frombuffer(buffer, dtype=np.uint8, count=rows * RECORD_BYTES).reshape(rows, RECORD_BYTES)
            keys = np.ascontiguousarray(table[:, :KEY_BYTES])
            payloads = np.ascontiguousarray(table[:, KEY_BYTES:])
            columns = [
                pa.FixedSizeBinaryArray.from_buffers(schema.field(0).type, rows, [None, pa.py_buffer(keys)]),
                pa.FixedSizeBinaryArray.from_buffers(schema.field(1).type, rows, [None, pa.py_buffer(payloads)]),
            ]
            writer.write_table(pa.Table.from_arrays(columns, schema=schema), row_group_size=rows)
            records += rows
            if filled < len(buffer):
                break
    durable(target)
    report("to-parquet", started, records)


def duckdb_sort(source: Path, target: Path, memory: str, threads: int, tmp: Path) -> None:
    import duckdb

    started = time.perf_counter()
    connection = duckdb.connect(":memory:")
    connection.execute(f"SET memory_limit = '{memory}'")
    connection.execute(f"SET threads = {threads}")
    connection.execute(f"SET temp_directory = '{tmp}'")
    connection.execute(
        f"COPY (SELECT key, payload FROM read_parquet('{source}') ORDER BY key) "
        f"TO '{target}' (FORMAT parquet, COMPRESSION uncompressed, DICTIONARY_SIZE_LIMIT 1)"
    )
    connection.close()
    durable(target)
    report("duckdb sort", started)


def polars_sort(source: Path, target: Path) -> None:
    import polars as pl

    started = time.perf_counter()
    pl.scan_parquet(source).sort("key").sink_parquet(target, compression="uncompressed", statistics=False)
    durable(target)
    report(f"polars sort ({pl.thread_pool_size()} threads)", started)


def to_records(source: Path, target: Path, expected: int | None) -> None:
    """Write the Parquet rows back as 100-byte records, in file order."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    started = time.perf_counter()
    parquet = pq.ParquetFile(source)
    records = 0
    with open(target, "wb") as out:
        for batch in parquet.iter_batches(batch_size=CHUNK_RECORDS, columns=["key", "payload"]):
            rows = batch.num_rows
            table = np.empty((rows, RECORD_BYTES), dtype=np.uint8)
            for index, (column, width) in enumerate(((0, KEY_BYTES), (1, RECORD_BYTES - KEY_BYTES))):
                array = batch.column(column)
                if pa.types.is_fixed_size_binary(array.type):
                    data = array.buffers()[1]
                    start = array.offset * width
                else:
                    array = array.cast(pa.large_binary()) if pa.types.is_binary_view(array.type) else array
                    offsets = np.frombuffer(
                        array.buffers()[1],
                        dtype=np.int64 if pa.types.is_large_binary(array.type) else np.int32,
                        count=len(array) + 1,
                        offset=array.offset * (8 if pa.types.is_large_binary(array.type) else 4),
                    )
                    if not np.all(np.diff(offsets) == width):
                        raise SystemExit(f"{source}: column {index} has values that are not {width} bytes")
                    data = array.buffers()[2]
                    start = int(offsets[0])
                values = np.frombuffer(data, dtype=np.uint8, count=rows * width, offset=start).reshape(rows, width)
                if index == 0:
                    table[:, :KEY_BYTES] = values
                else:
                    table[:, KEY_BYTES:] = values
            out.write(table.data)
            records += rows
    if expected is not None and records != expected:
        raise SystemExit(f"{source}: {records} rows, expected {expected}")
    report("to-records", started, records)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    convert = commands.add_parser("to-parquet")
    convert.add_argument("input", type=Path)
    convert.add_argument("output", type=Path)
    duck = commands.add_parser("duckdb")
    duck.add_argument("input", type=Path)
    duck.add_argument("output", type=Path)
    duck.add_argument("--memory", default="4GB")
    duck.add_argument("--threads", type=int, default=2)
    duck.add_argument("--tmp", type=Path, required=True)
    polars = commands.add_parser("polars")
    polars.add_argument("input", type=Path)
    polars.add_argument("output", type=Path)
    back = commands.add_parser("to-records")
    back.add_argument("input", type=Path)
    back.add_argument("output", type=Path)
    back.add_argument("--records", type=int, default=None)
    args = parser.parse_args()
    if args.command == "to-parquet":
        to_parquet(args.input, args.output)
    elif args.command == "duckdb":
        duckdb_sort(args.input, args.output, args.memory, args.threads, args.tmp)
    elif args.command == "polars":
        polars_sort(args.input, args.output)
    else:
        to_records(args.input, args.output, args.records)
    return 0


if __name__ == "__main__":
    sys.exit(main())
