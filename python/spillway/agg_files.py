"""``spillway agg`` on Parquet: the command, when its input or output is a ``.parquet`` file, runs here.

Parquet is read and written with pyarrow, a record batch at a time, and the
batches go to :class:`spillway.Aggregator` as Arrow columns (on the hash
engine's typed path, read in place). Arguments are the command's: ``--key``
and ``--value`` name columns by number (from 1) or by name, several joined
with commas. The output is Parquet or CSV (by its extension) or
tab-separated lines, written atomically: to a partial file, synced, then
renamed over the output; Ctrl-C or an error leaves neither.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from typing import Any, List, Optional

from .agg import Aggregator
from .errors import SpillwayError

# Rows per batch read from Parquet and handed to the engine.
_BATCH_ROWS = 1 << 20


def wants(arguments: List[str]) -> bool:
    """Whether ``spillway agg ARGUMENTS`` reads or writes Parquet, so runs here."""
    return any(argument.endswith(".parquet") for argument in arguments)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spillway agg",
        description="Aggregate values by key, reading or writing Parquet (through pyarrow).",
    )
    parser.add_argument("input", help="the Parquet file to aggregate")
    parser.add_argument("--key", default="1", help="key columns: numbers from 1 or names, joined with commas")
    parser.add_argument("--value", default=None, help="value columns, one per function (or one for all)")
    parser.add_argument("-f", "--function", default="count", help="functions joined with +: sum+mean")
    parser.add_argument("--engine", default="cbt", help="cbt or hash (several columns take hash)")
    parser.add_argument("--memory", default="1G", help="memory the engine may use (K/M/G suffixes)")
    parser.add_argument("--threads", type=int, default=2, help="the engine's threads")
    parser.add_argument("-o", "--output", default=None,
                        help="a .parquet, .csv or other (tab-separated) file; - discards; none: standard output")
    parser.add_argument("--json", action="store_true", help="print the report as JSON (results need --output)")
    return parser


def _columns(text: Optional[str], names: List[str], what: str) -> List[str]:
    """Column names from numbers (from 1) or names, joined with commas."""
    if text is None:
        return []
    columns = []
    for part in text.split(","):
        part = part.strip()
        if part.isdigit() and part not in names:
            number = int(part)
            if not 1 <= number <= len(names):
                raise SpillwayError(f"--{what} {part}: the file has columns 1 to {len(names)} ({', '.join(names)})")
            columns.append(names[number - 1])
        elif part in names:
            columns.append(part)
        else:
            raise SpillwayError(f"--{what} {part}: no such column; the file has {', '.join(names)}")
    return columns


def _write(table: Any, output: Optional[str]) -> None:
    """Writes ``table`` to ``output`` atomically (partial file, fsync, rename), or to standard output."""
    import pyarrow.csv as csv
    import pyarrow.parquet as pq

    if output == "-":
        return
    tab_separated = csv.WriteOptions(include_header=False, delimiter="\t", quoting_style="none")
    if output is None:
        sink = sys.stdout.buffer
        csv.write_csv(table, sink, tab_separated)
        sink.flush()
        return
    directory = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(directory):
        raise SpillwayError(f"--output {output}: the directory {directory} does not exist")
    partial = os.path.join(directory, f".{os.path.basename(output)}.partial-{os.getpid()}")
    try:
        if output.endswith(".parquet"):
            pq.write_table(table, partial)
        else:
            csv.write_csv(table, partial, None if output.endswith(".csv") else tab_separated)
        with open(partial, "rb") as written:
            os.fsync(written.fileno())
        os.replace(partial, output)
        descriptor = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)
    finally:
        if os.path.exists(partial):
            os.remove(partial)


def _terminate(_signal: int, _frame: Any) -> None:
    raise SystemExit(143)


def main(arguments: List[str]) -> int:
    args = _parser().parse_args(arguments)
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return _run(args)
    except KeyboardInterrupt:
        print("spillway: interrupted", file=sys.stderr)
        return 130
    except SystemExit as stop:
        if stop.code == 143:
            print("spillway: terminated", file=sys.stderr)
        raise
    except (SpillwayError, OSError) as error:
        print(f"spillway: {error}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    import numpy
    import pyarrow
    import pyarrow.parquet as pq

    if args.json and args.output is None:
        raise SpillwayError("--json prints the report to standard output, so the results need --output FILE")
    started = time.monotonic()
    try:
        source = pq.ParquetFile(args.input)
    except (pyarrow.ArrowException, OSError) as error:
        raise SpillwayError(f"{args.input}: not a Parquet file that can be read: {error}") from None
    names = source.schema_arrow.names
    keys = _columns(args.key, names, "key")
    values = _columns(args.value, names, "value")
    if not values and args.function != "count":
        raise SpillwayError(f"--value N is needed for {args.function}")
    functions = [part.strip() for part in args.function.split("+")]
    aggregator = Aggregator(args.function, engine=args.engine, memory=args.memory, threads=args.threads,
                            keys=keys if len(keys) > 1 else 1)
    records = 0
    for batch in source.iter_batches(batch_size=_BATCH_ROWS, columns=list(dict.fromkeys(keys + values))):
        key_columns = [batch.column(name) for name in keys]
        value_columns = [batch.column(name) for name in values] or [numpy.ones(batch.num_rows, dtype=numpy.int64)]
        aggregator.insert_batch(key_columns if len(keys) > 1 else key_columns[0],
                                value_columns if len(value_columns) > 1 else value_columns[0])
        records += batch.num_rows
    aggregator.finalize()
    aggregated = time.monotonic() - started
    table = aggregator.to_arrow()
    # Keys under their own names, results under their functions' (a repeat gets _2, _3...).
    result_names = [f"{name}_{functions[:index].count(name) + 1}" if name in functions[:index] else name
                    for index, name in enumerate(functions)]
    table = table.rename_columns(keys + result_names)
    _write(table, args.output)
    elapsed = time.monotonic() - started
    stats = aggregator.stats()
    if args.json:
        print(json.dumps({"records": records, "keys": table.num_rows, "seconds": elapsed,
                          "aggregate_seconds": aggregated, "records_per_second": records / max(aggregated, 1e-9),
                          "stats": stats}))
    else:
        print(f"agg: {records} records, {table.num_rows} keys, {args.function} with the {args.engine} engine in "
              f"{elapsed:.3f} s ({records / max(aggregated, 1e-9):.0f} records/s); memory {stats['memory_bytes']} "
              "bytes", file=sys.stderr)
    return 0
