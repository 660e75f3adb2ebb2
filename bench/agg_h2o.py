#!/usr/bin/env python3
"""The group-by questions of the h2o.ai db-benchmark: its data, and Spillway, DuckDB and Polars answering them.

    agg_h2o.py generate DIR --rows N [--k 100] [--seed 1]
    agg_h2o.py spillway DIR
    agg_h2o.py duckdb DIR
    agg_h2o.py polars DIR

`generate` writes DIR/h2o.parquet from the benchmark's published definition of its group-by
data (N rows, K groups, no missing values, rows in random order):

    id1, id2   text "id001".."idK" (3 digits), uniform          (K distinct)
    id3        text "id0000000001".. (10 digits), uniform        (N/K distinct)
    id4, id5   integers 1..K, uniform
    id6        integers 1..N/K, uniform
    v1         integers 1..5, uniform
    v2         integers 1..15, uniform
    v3         floats uniform in [0, 100), rounded to 6 decimals

It generates and writes 10^7 rows at a time (row groups of 2^20 rows, Snappy), so its memory
stays small at 10^8 rows.

The others load the file into memory (untimed: `load_s`), then answer the questions the
benchmark asks that our functions express, each timed from its start to its answer held as a
table in memory (DuckDB `CREATE TABLE ans AS ...`, a Polars DataFrame, a `pyarrow.Table` from
Spillway's `to_arrow()`), with 2 threads:

    q1   sum(v1) by id1
    q2   sum(v1) by id1, id2
    q3   sum(v1), mean(v3) by id3
    q4   mean(v1), mean(v2), mean(v3) by id4
    q5   sum(v1), sum(v2), sum(v3) by id6
    q7   max(v1) - min(v2) by id3
    q8   the largest two v3 by id6
    q10  sum(v3), count by id1, id2, id3, id4, id5, id6

(q6, median and standard deviation by id4, id5, and q9, a regression by id2, id4, are left
out: the first needs a median, the second a correlation, which Spillway does not compute.)
Each prints one JSON line: `{"engine", "rows", "load_s", "questions": {"q1": {"s", "groups",
"check"}, ...}, "total_s", "geomean_s"}` (the geometric mean of the questions' times) where `check` sums each answer's columns: integers exactly,
floats to 6 significant digits, so the engines' answers can be compared.

Spillway takes each question as a Python user would: `spillway.Aggregator` on the hash engine
with the question's key columns and functions (`keys=[...]`, one value column per function),
fed the table's record batches of 2^20 rows (Arrow text keys and integer or float values, no
Python object per row); q7 subtracts the min from the max column with `pyarrow.compute`; q8
uses `top_k(2)`, which has no typed form and so takes the byte path.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

os.environ.setdefault("POLARS_MAX_THREADS", "2")

THREADS = 2
# Spillway's memory budget: beside a loaded table of 10^8 rows (about 6 GB) on a machine of 24 GB, past it the
# engine refuses inserts with an error rather than be killed.
BUDGET = "12G"
QUESTIONS = ["q1", "q2", "q3", "q4", "q5", "q7", "q8", "q10"]
GENERATE_ROWS = 10**7
ROW_GROUP = 1 << 20


def data_path(directory: Path) -> Path:
    return directory / "h2o.parquet"


def generate(directory: Path, rows: int, k: int, seed: int) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    groups = max(rows // k, 1)
    small_labels = pa.array([f"id{index:03d}" for index in range(1, k + 1)])
    large_labels = pa.array([f"id{index:010d}" for index in range(1, groups + 1)])
    started = time.monotonic()
    directory.mkdir(parents=True, exist_ok=True)
    writer = None
    for first in range(0, rows, GENERATE_ROWS):
        n = min(GENERATE_ROWS, rows - first)
        table = pa.table({
            "id1": small_labels.take(pa.array(rng.integers(0, k, n))),
            "id2": small_labels.take(pa.array(rng.integers(0, k, n))),
            "id3": large_labels.take(pa.array(rng.integers(0, groups, n))),
            "id4": rng.integers(1, k + 1, n, dtype=np.int32),
            "id5": rng.integers(1, k + 1, n, dtype=np.int32),
            "id6": rng.integers(1, groups + 1, n, dtype=np.int32),
            "v1": rng.integers(1, 6, n, dtype=np.int32),
            "v2": rng.integers(1, 16, n, dtype=np.int32),
            "v3": np.round(rng.random(n) * 100, 6),
        })
        if writer is None:
            writer = pq.ParquetWriter(data_path(directory), table.schema, compression="snappy")
        writer.write_table(table, row_group_size=ROW_GROUP)
    if writer is not None:
        writer.close()
    print(f"generate: {rows} rows, K={k}, {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)


def check(table: Any, measures: int) -> list[Any]:
    """The sum of each of the table's last `measures` columns: integers exact, floats to 6 significant digits (as
    text, so JSON keeps them)."""
    import numpy as np
    import pyarrow as pa

    sums = []
    for column in table.columns[-measures:]:
        if pa.types.is_decimal(column.type):  # DuckDB's sums of integers (HUGEINT)
            column = column.cast(pa.int64())
        values = column.to_numpy()
        if values.dtype.kind in "iu":
            sums.append(int(values.astype(np.int64).sum()))
        else:
            sums.append(f"{float(values.astype(np.float64).sum()):.6g}")
    return sums


def run_questions(engine: str, rows: int, load_s: float, answer: Callable[[str], Any],
                  table_of: Callable[[Any], Any]) -> None:
    """Times each question: `answer` computes it (timed), `table_of` makes its answer an Arrow table (untimed),
    the keys first, then the measures."""
    questions = {}
    for question in QUESTIONS:
        started = time.monotonic()
        result = answer(question)
        elapsed = time.monotonic() - started
        table = table_of(result)
        questions[question] = {"s": elapsed, "groups": table.num_rows, "check": check(table, MEASURES[question])}
        print(f"{engine} {question}: {elapsed:.3f} s, {table.num_rows} groups", file=sys.stderr, flush=True)
        del result, table
    times = [entry["s"] for entry in questions.values()]
    print(json.dumps({
        "engine": engine, "rows": rows, "load_s": load_s, "questions": questions, "total_s": sum(times),
        "geomean_s": math.exp(sum(math.log(max(time_s, 1e-9)) for time_s in times) / len(times)),
    }), flush=True)


# Measures per answer: its last columns.
MEASURES = {"q1": 1, "q2": 1, "q3": 2, "q4": 3, "q5": 3, "q7": 1, "q8": 1, "q10": 2}

SQL = {
    "q1": "SELECT id1, sum(v1) AS v1 FROM x GROUP BY id1",
    "q2": "SELECT id1, id2, sum(v1) AS v1 FROM x GROUP BY id1, id2",
    "q3": "SELECT id3, sum(v1) AS v1, avg(v3) AS v3 FROM x GROUP BY id3",
    "q4": "SELECT id4, avg(v1) AS v1, avg(v2) AS v2, avg(v3) AS v3 FROM x GROUP BY id4",
    "q5": "SELECT id6, sum(v1) AS v1, sum(v2) AS v2, sum(v3) AS v3 FROM x GROUP BY id6",
    "q7": "SELECT id3, max(v1) - min(v2) AS range_v1_v2 FROM x GROUP BY id3",
    "q8": "SELECT id6, v3 AS largest2_v3 FROM (SELECT id6, v3, row_number() OVER (PARTITION BY id6 ORDER BY v3 DESC)"
          " AS order_v3 FROM x WHERE v3 IS NOT NULL) sub_query WHERE order_v3 <= 2",
    "q10": "SELECT id1, id2, id3, id4, id5, id6, sum(v3) AS v3, count(*) AS count FROM x "
           "GROUP BY id1, id2, id3, id4, id5, id6",
}


def duckdb_answers(directory: Path) -> None:
    import duckdb

    connection = duckdb.connect()
    connection.execute(f"SET threads = {THREADS}")
    started = time.monotonic()
    connection.execute(f"CREATE TABLE x AS SELECT * FROM read_parquet('{data_path(directory)}')")
    load_s = time.monotonic() - started
    rows = connection.execute("SELECT count(*) FROM x").fetchone()[0]

    def answer(question: str) -> None:
        connection.execute("DROP TABLE IF EXISTS ans")
        connection.execute(f"CREATE TABLE ans AS {SQL[question]}")

    run_questions("duckdb", rows, load_s, answer, lambda _: connection.sql("SELECT * FROM ans").to_arrow_table())


def polars_answers(directory: Path) -> None:
    import polars as pl

    started = time.monotonic()
    x = pl.read_parquet(data_path(directory))
    load_s = time.monotonic() - started
    c = pl.col
    queries = {
        "q1": lambda: x.group_by("id1").agg(c("v1").sum()),
        "q2": lambda: x.group_by("id1", "id2").agg(c("v1").sum()),
        "q3": lambda: x.group_by("id3").agg(c("v1").sum(), c("v3").mean()),
        "q4": lambda: x.group_by("id4").agg(c("v1").mean(), c("v2").mean(), c("v3").mean()),
        "q5": lambda: x.group_by("id6").agg(c("v1").sum(), c("v2").sum(), c("v3").sum()),
        "q7": lambda: x.group_by("id3").agg((c("v1").max() - c("v2").min()).alias("range_v1_v2")),
        "q8": lambda: x.drop_nulls("v3").group_by("id6").agg(c("v3").top_k(2).alias("largest2_v3"))
                       .explode("largest2_v3"),
        "q10": lambda: x.group_by("id1", "id2", "id3", "id4", "id5", "id6").agg(
            c("v3").sum().alias("v3"), pl.len().alias("count")),
    }

    run_questions("polars", x.height, load_s, lambda question: queries[question](), lambda frame: frame.to_arrow())


def spillway_answers(directory: Path) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    import spillway

    started = time.monotonic()
    x = pq.read_table(data_path(directory))
    load_s = time.monotonic() - started
    # (key columns, functions, value columns) of each question Spillway's typed path answers.
    specs = {
        "q1": (["id1"], ["sum"], ["v1"]),
        "q2": (["id1", "id2"], ["sum"], ["v1"]),
        "q3": (["id3"], ["sum", "mean"], ["v1", "v3"]),
        "q4": (["id4"], ["mean", "mean", "mean"], ["v1", "v2", "v3"]),
        "q5": (["id6"], ["sum", "sum", "sum"], ["v1", "v2", "v3"]),
        "q7": (["id3"], ["max", "min"], ["v1", "v2"]),
        "q10": (["id1", "id2", "id3", "id4", "id5", "id6"], ["sum", "count"], ["v3", "v3"]),
    }

    def aggregate(keys: list[str], functions: list[str], values: list[str]) -> Any:
        aggregator = spillway.Aggregator(functions, engine="hash", threads=THREADS, memory=BUDGET, keys=keys)
        for batch in x.select(list(dict.fromkeys(keys + values))).to_batches(max_chunksize=ROW_GROUP):
            key_columns = [batch.column(name) for name in keys]
            aggregator.insert_batch(key_columns if len(keys) > 1 else key_columns[0],
                                    [batch.column(name) for name in values])
        return aggregator.to_arrow()

    def answer(question: str) -> Any:
        if question == "q8":
            tops = spillway.Aggregator("top_k(2)", engine="hash", memory=BUDGET)
            for batch in x.select(["id6", "v3"]).to_batches(max_chunksize=ROW_GROUP):
                tops.insert_batch(batch.column("id6").to_numpy(), batch.column("v3").to_numpy())
            tops.finalize()
            keys, largest = [], []
            for key, top in tops:
                keys.extend([key] * len(top))
                largest.extend(top)
            return pa.table({"id6": np.array(keys, dtype=np.int64), "largest2_v3": np.array(largest)})
        table = aggregate(*specs[question])
        if question == "q7":
            return pa.table({"id3": table.column(0), "range_v1_v2": pc.subtract(table.column(1), table.column(2))})
        return table

    run_questions("spillway", x.num_rows, load_s, answer, lambda table: table)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("generate", help="write DIR/h2o.parquet")
    make.add_argument("dir", type=Path)
    make.add_argument("--rows", type=int, required=True)
    make.add_argument("--k", type=int, default=100)
    make.add_argument("--seed", type=int, default=1)
    for name in ("spillway", "duckdb", "polars"):
        commands.add_parser(name, help=f"answer the questions with {name}").add_argument("dir", type=Path)
    args = parser.parse_args()
    try:
        if args.command == "generate":
            generate(args.dir, args.rows, args.k, args.seed)
        else:
            {"spillway": spillway_answers, "duckdb": duckdb_answers, "polars": polars_answers}[args.command](args.dir)
    except (OSError, ValueError, RuntimeError) as error:
        print(f"agg_h2o.py {args.command}: {error}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
