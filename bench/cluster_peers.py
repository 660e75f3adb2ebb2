#!/usr/bin/env python3
"""Drive the cluster workload's contenders: Spillway on a simulated Ray
cluster, Dask and Spark on simulated clusters of the same shape.

    cluster_peers.py ENGINE JOB INPUT OUTPUT [--nodes 4] [--lose-node] [--tmp DIR]

ENGINE is spillway (``spillway.cluster.local``), dask (``LocalCluster``,
NODES workers of one thread) or spark (``local-cluster[NODES,1,1024]``,
else ``local[2]`` when that does not start from the pip package). JOB is
wordcount (text), index (``id<TAB>text`` lines) or sort (gensort records).
Every engine writes tab-separated lines for the MapReduce jobs (checked
against ``spillway mr`` with ``mr_peers.py digest``), and for the sort the
report's valsort verdict and checksum.

Run it inside a loopback-only network namespace (the workload's commands
do): every engine listens on 127.0.0.1 only. It prints one JSON line:
``start_s`` (starting the cluster), ``load_s`` (Spillway: storing the input
in the cluster's file system), ``job_s`` (the job itself), ``peak_rss_bytes``
(the largest sum of the resident memory of every process in the namespace,
sampled every 0.2 s), and the engine's own figures (bytes moved between
nodes, locality, reads and writes per byte, the node removed, and how long
the copies of a lost node were still being made again after the job).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

JOBS = ("wordcount", "index", "sort")
RECORD_BYTES = 100
KEY_BYTES = 10


def parse_block_bytes(text: str) -> int:
    """``64M`` or ``64MiB`` in bytes."""
    return int(text.removesuffix("iB").removesuffix("M")) << 20


def namespace_pids() -> list[int]:
    """The processes in this process's network namespace (the run's own).
    As `spillway.cluster.network.namespace_pids`, written again here because
    the Dask and Spark runs use the harness's Python, which has no Spillway."""
    mine = os.readlink("/proc/self/ns/net")
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/ns/net") == mine:
                    pids.append(int(entry))
            except OSError:
                continue
    return pids


def stop_after(seconds: float, engine: str) -> None:
    """Ends the run, and every process it started, after ``seconds``: a peer
    that cannot finish in reasonable time fails with that reason instead of
    holding the benchmark."""

    def expire() -> None:
        print(f"{engine}: did not finish within the time limit of {seconds:.0f} s", file=sys.stderr, flush=True)
        for pid in namespace_pids():
            if pid != os.getpid():
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        os._exit(124)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()


class PeakMemory:
    """The largest total RSS of the namespace's processes, sampled in a thread."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        page = os.sysconf("SC_PAGE_SIZE")
        while not self._stop.is_set():
            total = 0
            for pid in namespace_pids():
                try:
                    with open(f"/proc/{pid}/statm") as statm:
                        total += int(statm.read().split()[1]) * page
                except OSError:
                    continue
            self.peak = max(self.peak, total)
            self._stop.wait(0.2)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def warm_up_workers(cluster) -> None:
    """One task per node that loads Spillway's native module: Ray starts its
    worker processes lazily, and a cluster in use has them running (Spark's
    start likewise runs a first job, and Dask starts its workers eagerly)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=1)
    def load() -> str:
        from spillway import _native

        return _native.__name__

    ray.get([
        load.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False)).remote()
        for node in (entry["id"] for entry in cluster.nodes())
    ])  # fmt: skip


def repair_after(cluster, result: dict) -> None:
    """How long the file system's repairs (copies made again after a node
    was lost) went on after the job ended: they run beside the job."""
    started = time.perf_counter()
    result["blocks_repaired"] = cluster.refresh()
    result["repair_after_s"] = time.perf_counter() - started


def spillway_job(args: argparse.Namespace, result: dict) -> None:
    from spillway.cluster import local

    started = time.perf_counter()
    with local(nodes=args.nodes, object_store_bytes=args.object_store, directory=Path(args.tmp) / "blocks") as cluster:
        warm_up_workers(cluster)
        result["start_s"] = time.perf_counter() - started
        started = time.perf_counter()
        form = {"wordcount": "text", "index": "tsv", "sort": "gensort"}[args.job]
        cluster.put(args.input, "input", format=form, block_bytes=args.block_size)
        result["load_s"] = time.perf_counter() - started
        lost = []

        def lose_halfway(phase: str, done: int, total: int) -> None:
            if args.lose_node and not lost and phase in ("map", "partition") and done >= total // 2:
                lost.append(cluster.remove_node(args.nodes - 1))

        started = time.perf_counter()
        if args.job == "sort":
            report = cluster.sort("input", "sorted", memory=args.memory, progress=lose_halfway)
            result["job_s"] = time.perf_counter() - started
            repair_after(cluster, result)
            valsort = report.valsort
            result.update(
                sorted=valsort.sorted, records=valsort.records, checksum=valsort.checksum,
                reads_per_byte=report.reads_per_byte, writes_per_byte=report.writes_per_byte,
                locality=report.local_share, bytes_moved=report.bytes_moved, phase_seconds=report.phases,
                ranges_made_again=report.ranges_made_again,
            )  # fmt: skip
        else:
            job = "inverted_index" if args.job == "index" else args.job
            report = cluster.mapreduce(job, "input", "output", progress=lose_halfway)
            result["job_s"] = time.perf_counter() - started
            repair_after(cluster, result)
            moved = sum(phase.bytes_moved for phase in report.phases)
            result.update(bytes_moved=moved, locality=report.locality, partitions=report.partitions)
            output = Path(args.output)
            output.mkdir(parents=True, exist_ok=True)
            for index, name in enumerate(report.outputs):
                cluster.get(name, output / f"part-{index:05}.tsv")
        result["lost_node"] = lost[0] if lost else None


def dask_job(args: argparse.Namespace, result: dict) -> None:
    import dask.bag as db
    import pandas as pd
    from dask.distributed import Client, LocalCluster

    started = time.perf_counter()
    cluster = LocalCluster(
        n_workers=args.nodes, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None,
        local_directory=args.tmp, memory_limit=args.worker_memory,
    )  # fmt: skip
    client = Client(cluster)
    result["start_s"] = time.perf_counter() - started
    started = time.perf_counter()
    if args.job == "wordcount":
        lines = db.read_text(args.input, blocksize=args.block_size)
        words = lines.map(lambda line: [word for word in line.rstrip("\n").split(" ") if word]).flatten()
        counts = words.frequencies()
        counts.map(lambda pair: f"{pair[0]}\t{pair[1]}").to_textfiles(f"{args.output}/part-*.tsv")
    elif args.job == "index":
        lines = db.read_text(args.input, blocksize=args.block_size)

        def postings(line: str):
            number, _, text = line.rstrip("\n").partition("\t")
            return [(term, int(number)) for term in set(text.split(" ")) if term]

        def add(ids: set, pair) -> set:
            ids.add(pair[1])
            return ids

        # `set` (a callable) makes each key's first, empty set.
        grouped = lines.map(postings).flatten().foldby(lambda pair: pair[0], add, set, lambda a, b: a | b, set)
        grouped.map(lambda item: f"{item[0]}\t{','.join(str(i) for i in sorted(item[1]))}").to_textfiles(
            f"{args.output}/part-*.tsv"
        )
    else:
        import dask
        import dask.dataframe as dd

        step = parse_block_bytes(args.block_size) // RECORD_BYTES * RECORD_BYTES
        path, output = os.path.abspath(args.input), os.path.abspath(args.output)

        def load(offset: int) -> pd.DataFrame:
            with open(path, "rb") as file:
                file.seek(offset)
                data = file.read(step)
            starts = range(0, len(data), RECORD_BYTES)
            # Hex keys sort as the raw bytes do, as strings Dask can sample.
            return pd.DataFrame({"key": [data[at:at + KEY_BYTES].hex() for at in starts],
                                 "record": [data[at:at + RECORD_BYTES] for at in starts]})  # fmt: skip

        def write(part: pd.DataFrame, partition_info=None) -> pd.DataFrame:
            Path(output, f"part-{partition_info['number']:05}.dat").write_bytes(b"".join(part["record"]))
            return pd.DataFrame({"records": [len(part)]})

        Path(output).mkdir(parents=True, exist_ok=True)
        # Records stay Python bytes (Dask would otherwise try to make them text).
        dask.config.set({"dataframe.convert-string": False})
        records = dd.from_map(load, range(0, os.path.getsize(path), step))
        ordered = records.sort_values("key", npartitions=args.nodes)
        ordered.map_partitions(write, meta={"records": "int64"}).compute()
    result["job_s"] = time.perf_counter() - started
    client.close()
    cluster.close()


def spark_job(args: argparse.Namespace, result: dict) -> None:
    from pyspark.sql import SparkSession

    started = time.perf_counter()
    spark = None
    for master in (f"local-cluster[{args.nodes},1,1024]", "local[2]"):
        try:
            spark = (
                SparkSession.builder.master(master).appName(f"cluster-{args.job}")
                .config("spark.local.dir", args.tmp).config("spark.driver.host", "127.0.0.1")
                .config("spark.driver.bindAddress", "127.0.0.1").config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false").getOrCreate()
            )  # fmt: skip
            spark.sparkContext.parallelize([1]).count()
            result["master"] = master
            break
        except Exception as error:  # local-cluster needs a Spark install the pip package may lack
            result.setdefault("fallback", str(error)[:200])
            if spark is not None:
                spark.stop()
            spark = None
    if spark is None:
        raise SystemExit("spark: neither local-cluster nor local[2] started")
    spark.sparkContext.setLogLevel("ERROR")
    result["start_s"] = time.perf_counter() - started
    started = time.perf_counter()
    if args.job == "wordcount":
        lines = spark.sparkContext.textFile(args.input)
        counts = lines.flatMap(lambda line: [word for word in line.split(" ") if word]).map(lambda w: (w, 1))
        out = counts.reduceByKey(lambda a, b: a + b).map(lambda pair: f"{pair[0]}\t{pair[1]}")
    elif args.job == "index":
        lines = spark.sparkContext.textFile(args.input)
        pairs = lines.map(lambda line: line.split("\t", 1)).flatMap(
            lambda f: [(term, int(f[0])) for term in set(f[1].split(" ")) if term] if len(f) == 2 else []
        )
        out = pairs.groupByKey().map(lambda item: f"{item[0]}\t{','.join(str(i) for i in sorted(set(item[1])))}")
    if args.job == "sort":
        output = os.path.abspath(args.output)

        def write(index: int, records):
            with open(os.path.join(output, f"part-{index:05}.dat"), "wb") as file:
                for record in records:
                    file.write(record)
            yield index

        Path(output).mkdir(parents=True, exist_ok=True)
        records = spark.sparkContext.binaryRecords(args.input, RECORD_BYTES)
        keyed = records.map(lambda record: (bytes(record[:KEY_BYTES]), bytes(record)))
        keyed.sortByKey(numPartitions=args.nodes).values().mapPartitionsWithIndex(write).count()
    else:
        out.saveAsTextFile(args.output)
    result["job_s"] = time.perf_counter() - started
    spark.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("engine", choices=["spillway", "dask", "spark"])
    parser.add_argument("job", choices=JOBS)
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--lose-node", action="store_true", help="remove a node halfway through the job")
    parser.add_argument("--tmp", default="/tmp")
    parser.add_argument("--block-size", default="64M")
    parser.add_argument("--object-store", default="1G")
    parser.add_argument("--memory", default="1G", help="each node's sort budget (Spillway)")
    parser.add_argument("--worker-memory", default="2GiB", help="each Dask worker's limit")
    parser.add_argument("--time-limit", type=float, help="seconds after which the run fails, its processes killed")
    args = parser.parse_args(argv)
    if args.time_limit:
        stop_after(args.time_limit, args.engine)
    shutil.rmtree(args.output, ignore_errors=True)
    if args.engine == "dask" and args.block_size.endswith("M"):
        args.block_size = f"{args.block_size[:-1]}MiB"
    peak = PeakMemory()
    result: dict = {"engine": args.engine, "job": args.job, "nodes": args.nodes}
    {"spillway": spillway_job, "dask": dask_job, "spark": spark_job}[args.engine](args, result)
    result["peak_rss_bytes"] = peak.stop()
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
