#!/usr/bin/env python3
"""Drive the MapReduce workloads' Python peers (DuckDB, Polars, Spark) and check outputs.

    mr_peers.py ENGINE JOB INPUT OUTPUT [--memory 1GiB] [--threads 2] [--tmp DIR]
                [--n 5] [--gap MS] [--vertices N] [--iterations K] [--damping D]
    mr_peers.py digest JOB OUTPUT [--format tsv|uniq] [--save FILE | --expect FILE]
    mr_peers.py docs TEXT OUTPUT

ENGINE is duckdb, polars or spark; JOB is wordcount, ngram, index, sessions or
pagerank, with the inputs `spillway gen` makes (text; `docs` turns text into
`id<TAB>text` lines for the inverted index; click logs `user<TAB>time<TAB>url`;
R-MAT edges `src<TAB>dst`). Every engine writes tab-separated lines, the same
lines `spillway mr` writes, into OUTPUT (a file, or a directory of part files
for Spark), and makes them durable (fdatasync of every file and the
directory) before it exits, as `spillway mr` does.

`digest` reduces an output (a file, or every `part-*` file of a directory) to
what must agree between engines: its line count and an order-free checksum of
its lines (the sum of DuckDB's hash of each line), or for PageRank the vertex
count, the sum of the ranks and the 20 highest-ranked vertices (ranks are
floating-point sums, equal only to rounding). `--save` writes the digest of
Spillway's output; `--expect` fails unless a peer's digest equals it.

The peers are the libraries installed from PyPI (`duckdb`, `polars`,
`pyspark`); this file only calls their public APIs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

JOBS = ("wordcount", "ngram", "index", "sessions", "pagerank")


def durable(path: Path) -> None:
    """fdatasync every file under `path` (a file or a directory) and the directories."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for file in files:
        fd = os.open(file, os.O_RDONLY)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)
    for directory in {file.parent for file in files} | {path.parent}:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# ---------------------------------------------------------------------------
# DuckDB


def duckdb_job(args: argparse.Namespace) -> None:
    import duckdb

    con = duckdb.connect(config={"memory_limit": args.memory, "threads": args.threads, "temp_directory": args.tmp})
    con.execute("SET preserve_insertion_order = false")
    lines = (
        f"read_csv('{args.input}', columns={{'line': 'VARCHAR'}}, delim='\\x1f', quote='', escape='', "
        "header=false, auto_detect=false)"
    )
    tsv = "(FORMAT csv, DELIMITER '\t', HEADER false, QUOTE '', ESCAPE '')"
    if args.job == "wordcount":
        query = (
            f"SELECT word, count(*) FROM (SELECT unnest(string_split(line, ' ')) AS word FROM {lines}) "
            "WHERE word <> '' GROUP BY word"
        )
    elif args.job == "ngram":
        n = args.n
        query = (
            "SELECT gram, count(*) FROM (SELECT unnest(list_transform(range(1, len(words) - "
            f"{n - 2}), lambda i: array_to_string(words[i:i + {n - 1}], ' '))) AS gram FROM "
            f"(SELECT list_filter(string_split(line, ' '), lambda w: w <> '') AS words FROM {lines}) "
            f"WHERE len(words) >= {n}) GROUP BY gram"
        )
    elif args.job == "index":
        docs = (
            f"read_csv('{args.input}', columns={{'id': 'BIGINT', 'text': 'VARCHAR'}}, delim='\t', quote='', "
            "escape='', header=false, auto_detect=false)"
        )
        query = (
            "SELECT term, string_agg(id::VARCHAR, ',' ORDER BY id) FROM (SELECT DISTINCT id, "
            f"unnest(string_split(text, ' ')) AS term FROM {docs}) WHERE term <> '' GROUP BY term"
        )
    elif args.job == "sessions":
        clicks = (
            f"read_csv('{args.input}', columns={{'u': 'VARCHAR', 't': 'BIGINT', 'url': 'VARCHAR'}}, "
            "delim='\t', quote='', escape='', header=false, auto_detect=false)"
        )
        query = (
            f"WITH c AS (SELECT u, t FROM {clicks}), "
            f"f AS (SELECT u, t, CASE WHEN t - lag(t) OVER w <= {args.gap} THEN 0 ELSE 1 END AS new "
            "FROM c WINDOW w AS (PARTITION BY u ORDER BY t)), "
            "s AS (SELECT u, t, sum(new) OVER (PARTITION BY u ORDER BY t ROWS UNBOUNDED PRECEDING) AS sid FROM f) "
            "SELECT u, min(t), max(t), count(*) FROM s GROUP BY u, sid"
        )
    elif args.job == "pagerank":
        duckdb_pagerank(con, args)
        return
    else:
        raise SystemExit(f"duckdb: no job {args.job}")
    con.execute(f"COPY ({query}) TO '{args.output}' {tsv}")


def duckdb_pagerank(con, args: argparse.Namespace) -> None:
    n, d = args.vertices, args.damping
    con.execute(
        f"CREATE TEMP TABLE e AS SELECT * FROM read_csv('{args.input}', columns={{'s': 'BIGINT', 'd': 'BIGINT'}}, "
        "delim='\t', header=false, auto_detect=false)"
    )
    con.execute("CREATE TEMP TABLE deg AS SELECT s AS v, count(*) AS k FROM e GROUP BY s")
    con.execute(f"CREATE TEMP TABLE r AS SELECT v, 1.0 / {n} AS r FROM (SELECT s AS v FROM e UNION SELECT d FROM e)")
    for _ in range(args.iterations):
        con.execute(
            f"CREATE OR REPLACE TEMP TABLE r AS SELECT r.v, {(1 - d) / n!r} + {d!r} * coalesce(c.x, 0) AS r FROM r "
            "LEFT JOIN (SELECT e.d AS v, sum(r.r / deg.k) AS x FROM e JOIN r ON e.s = r.v JOIN deg ON deg.v = e.s "
            "GROUP BY e.d) c ON c.v = r.v"
        )
    con.execute(f"COPY (SELECT v, r FROM r) TO '{args.output}' (FORMAT csv, DELIMITER '\t', HEADER false)")


# ---------------------------------------------------------------------------
# Polars (streaming engine)


def polars_job(args: argparse.Namespace) -> None:
    import polars as pl

    def lines(columns: list[str]) -> "pl.LazyFrame":
        return pl.scan_csv(
            args.input, has_header=False, separator="\t" if len(columns) > 1 else "\x1f", quote_char=None,
            new_columns=columns, infer_schema=False,
        )

    if args.job == "wordcount":
        frame = (
            lines(["line"]).select(pl.col("line").str.split(" ").alias("w")).explode("w")
            .filter(pl.col("w") != "").group_by("w").len()
        )
    elif args.job == "ngram":
        n = args.n
        words = (
            lines(["line"]).with_row_index("l").select("l", pl.col("line").str.split(" ").alias("w"))
            .explode("w").filter(pl.col("w") != "")
        )
        gram = pl.concat_str([pl.col("w").shift(-k).over("l") for k in range(n)], separator=" ")
        frame = words.select(gram.alias("g")).drop_nulls().group_by("g").len()
    elif args.job == "index":
        frame = (
            lines(["id", "text"]).select(pl.col("id").cast(pl.Int64), pl.col("text").str.split(" ").alias("t"))
            .explode("t").filter(pl.col("t") != "").unique(["id", "t"])
            .group_by("t").agg(pl.col("id").sort().cast(pl.String).str.join(","))
        )
    elif args.job == "sessions":
        clicks = lines(["u", "t", "url"]).select("u", pl.col("t").cast(pl.Int64)).sort(["u", "t"])
        new = (pl.col("t") - pl.col("t").shift(1).over("u")).fill_null(args.gap + 1) > args.gap
        frame = (
            clicks.with_columns(new.cast(pl.Int64).cum_sum().over("u").alias("sid"))
            .group_by("u", "sid").agg(pl.col("t").min().alias("a"), pl.col("t").max().alias("b"), pl.len())
            .select("u", "a", "b", "len")
        )
    elif args.job == "pagerank":
        polars_pagerank(pl, args)
        return
    else:
        raise SystemExit(f"polars: no job {args.job}")
    frame.sink_csv(args.output, separator="\t", include_header=False, quote_style="never")


def polars_pagerank(pl, args: argparse.Namespace) -> None:
    n, d = args.vertices, args.damping
    edges = pl.read_csv(args.input, has_header=False, separator="\t", new_columns=["s", "d"])
    degree = edges.group_by("s").len().rename({"len": "k"})
    ranks = pl.concat([edges.select(pl.col("s").alias("v")), edges.select(pl.col("d").alias("v"))]).unique()
    ranks = ranks.with_columns(pl.lit(1.0 / n).alias("r"))
    for _ in range(args.iterations):
        shares = (
            edges.join(ranks, left_on="s", right_on="v").join(degree, on="s")
            .group_by("d").agg((pl.col("r") / pl.col("k")).sum().alias("x"))
        )
        ranks = ranks.join(shares, left_on="v", right_on="d", how="left").select(
            "v", ((1 - d) / n + d * pl.col("x").fill_null(0.0)).alias("r")
        )
    ranks.write_csv(args.output, separator="\t", include_header=False)


# ---------------------------------------------------------------------------
# Spark, local mode


def spark_job(args: argparse.Namespace) -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    spark = (
        SparkSession.builder.master(f"local[{args.threads}]").appName(f"mr-{args.job}")
        .config("spark.driver.memory", args.spark_memory).config("spark.local.dir", args.tmp)
        .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", str(4 * args.threads))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    text = lambda: spark.read.text(args.input)  # noqa: E731
    if args.job == "wordcount":
        frame = (
            text().select(F.explode(F.split("value", " ")).alias("w")).where(F.col("w") != "")
            .groupBy("w").count()
        )
    elif args.job == "ngram":
        n = args.n
        words = F.filter(F.split("value", " "), lambda w: w != "")
        grams = F.transform(
            F.sequence(F.lit(1), F.size("w") - n + 1),
            lambda i: F.array_join(F.slice("w", i, n), " "),
        )
        frame = (
            text().select(words.alias("w")).where(F.size("w") >= n).select(F.explode(grams).alias("g"))
            .groupBy("g").count()
        )
    elif args.job == "index":
        docs = text().select(F.split("value", "\t", 2).alias("f"))
        frame = (
            docs.select(F.col("f")[0].cast("long").alias("id"), F.explode(F.split(F.col("f")[1], " ")).alias("t"))
            .where(F.col("t") != "").groupBy("t")
            .agg(F.array_join(F.array_sort(F.collect_set("id")).cast("array<string>"), ",").alias("ids"))
        )
    elif args.job == "sessions":
        fields = text().select(F.split("value", "\t").alias("f"))
        clicks = fields.select(F.col("f")[0].alias("u"), F.col("f")[1].cast("long").alias("t"))
        window = Window.partitionBy("u").orderBy("t")
        gap = F.col("t") - F.lag("t").over(window)
        flagged = clicks.withColumn("new", F.when(gap <= args.gap, 0).otherwise(1))
        sessions = flagged.withColumn("sid", F.sum("new").over(window.rowsBetween(Window.unboundedPreceding, 0)))
        frame = sessions.groupBy("u", "sid").agg(F.min("t"), F.max("t"), F.count("*")).drop("sid")
    elif args.job == "pagerank":
        spark_pagerank(spark, F, args)
        spark.stop()
        return
    else:
        raise SystemExit(f"spark: no job {args.job}")
    frame.select(F.concat_ws("\t", *frame.columns)).write.mode("overwrite").text(args.output)
    spark.stop()


def spark_pagerank(spark, F, args: argparse.Namespace) -> None:
    n, d = args.vertices, args.damping
    fields = spark.read.text(args.input).select(F.split("value", "\t").alias("f"))
    edges = fields.select(F.col("f")[0].cast("long").alias("s"), F.col("f")[1].cast("long").alias("d")).cache()
    degree = edges.groupBy("s").count().withColumnRenamed("count", "k")
    ranks = edges.select(F.col("s").alias("v")).union(edges.select(F.col("d").alias("v"))).distinct()
    ranks = ranks.withColumn("r", F.lit(1.0 / n))
    for _ in range(args.iterations):
        shares = (
            edges.join(ranks, edges.s == ranks.v).join(degree, "s")
            .groupBy("d").agg(F.sum(F.col("r") / F.col("k")).alias("x"))
        )
        ranks = ranks.join(shares, ranks.v == shares.d, "left").select(
            "v", (F.lit((1 - d) / n) + F.lit(d) * F.coalesce(F.col("x"), F.lit(0.0))).alias("r")
        ).localCheckpoint()
    ranks.select(F.concat_ws("\t", "v", "r")).write.mode("overwrite").text(args.output)


# ---------------------------------------------------------------------------
# Inputs and checks


def docs(text: Path, output: Path) -> None:
    """Numbers the lines of `text`: `id<TAB>line`, ids from 1."""
    with open(text, "rb") as source, open(output, "wb") as target:
        for number, line in enumerate(source, start=1):
            target.write(b"%d\t" % number + line)


def output_files(output: Path) -> list[str]:
    if output.is_file():
        return [str(output)]
    names = sorted(p for p in output.iterdir() if p.is_file() and (p.name.startswith("part-")) and p.stat().st_size)
    return [str(p) for p in names if not p.name.endswith((".crc", ".partial"))]


def digest(job: str, output: Path, form: str) -> dict:
    import duckdb

    files = output_files(output)
    if not files:
        return {"lines": 0}
    con = duckdb.connect()
    # An inverted index's lines hold every id of a frequent term: megabytes.
    source = (
        f"read_csv({files!r}, columns={{'line': 'VARCHAR'}}, delim='\\x1f', quote='', escape='', header=false, "
        "auto_detect=false, max_line_size=268435456, buffer_size=536870912)"
    )
    if form == "uniq":  # `uniq -c`: spaces, the count, a space, the word
        source = (
            f"(SELECT regexp_extract(line, '^ *[0-9]+ (.*)$', 1) || chr(9) || regexp_extract(line, '^ *([0-9]+) ', 1)"
            f" AS line FROM {source})"
        )
    if job == "pagerank":
        ranks = f"(SELECT split_part(line, chr(9), 1)::BIGINT AS v, split_part(line, chr(9), 2)::DOUBLE AS r FROM {source})"
        lines, total = con.execute(f"SELECT count(*), sum(r) FROM {ranks}").fetchone()
        top = [row[0] for row in con.execute(f"SELECT v FROM {ranks} ORDER BY r DESC, v LIMIT 20").fetchall()]
        return {"lines": lines, "rank_sum": total, "top": top}
    lines, checksum = con.execute(f"SELECT count(*), sum(hash(line))::VARCHAR FROM {source}").fetchone()
    return {"lines": lines, "checksum": checksum}


def agrees(expected: dict, got: dict) -> bool:
    if "rank_sum" in expected:
        close = abs(expected["rank_sum"] - got.get("rank_sum", 0.0)) <= 1e-9 + 1e-6 * abs(expected["rank_sum"])
        return expected["lines"] == got["lines"] and close and expected["top"] == got.get("top")
    return expected == got


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["duckdb", "polars", "spark", "digest", "docs"])
    parser.add_argument("arguments", nargs="+")
    parser.add_argument("--memory", default="1GiB")
    parser.add_argument("--spark-memory", default="1g")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tmp", default="/tmp")
    parser.add_argument("--n", type=int, default=5)
    parser.add_argument("--gap", type=int, default=30 * 60 * 1000)
    parser.add_argument("--vertices", type=int, default=0)
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--damping", type=float, default=0.85)
    parser.add_argument("--format", default="tsv", choices=["tsv", "uniq"])
    parser.add_argument("--save")
    parser.add_argument("--expect")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    if args.command == "docs":
        docs(Path(args.arguments[0]), Path(args.arguments[1]))
        return 0
    if args.command == "digest":
        job, output = args.arguments
        found = digest(job, Path(output), args.format)
        if args.save:
            Path(args.save).write_text(json.dumps(found))
        if args.expect:
            expected = json.loads(Path(args.expect).read_text())
            if not agrees(expected, found):
                print(f"RESULTS DISAGREE: {output}: {found}, expected {expected}", file=sys.stderr)
                return 1
        print(json.dumps(found))
        return 0
    args.job, args.input, args.output = args.arguments
    if args.job not in JOBS:
        raise SystemExit(f"unknown job {args.job}; the jobs are {', '.join(JOBS)}")
    {"duckdb": duckdb_job, "polars": polars_job, "spark": spark_job}[args.command](args)
    durable(Path(args.output))
    print(f"{args.command} {args.job}: {time.perf_counter() - started:.3f} s", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
