"""``spillway cluster ...``: the cluster's commands (Python, since they
drive Ray). Arguments in, calls to :mod:`spillway.cluster`, results and
errors out.

``spillway cluster local [--nodes N] -- COMMAND`` starts a simulated cluster
in a loopback-only network namespace and runs COMMAND there with
``SPILLWAY_CLUSTER_ADDRESS`` and ``SPILLWAY_CLUSTER_DIR`` set, which the
other commands read when ``--address`` and ``--dir`` are not given.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import asdict
from typing import List

from ..errors import SpillwayError
from . import network

ADDRESS_VARIABLE = "SPILLWAY_CLUSTER_ADDRESS"
DIRECTORY_VARIABLE = "SPILLWAY_CLUSTER_DIR"
# The hidden verb that `local` runs inside the namespace.
_INSIDE = "_local-inside"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="spillway cluster", description="Spillway on a Ray cluster.")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    def with_address(verb: argparse.ArgumentParser) -> argparse.ArgumentParser:
        verb.add_argument("--address", default=os.environ.get(ADDRESS_VARIABLE), help=f"the Ray head's HOST:PORT (default ${ADDRESS_VARIABLE})")
        verb.add_argument("--dir", default=os.environ.get(DIRECTORY_VARIABLE), help=f"each node's block directory (default ${DIRECTORY_VARIABLE})")
        verb.add_argument("--json", action="store_true", help="print the result as JSON")
        return verb

    for name in ("local", _INSIDE):
        local = verbs.add_parser(name, help="run COMMAND against a fresh simulated cluster" if name == "local" else argparse.SUPPRESS)
        local.add_argument("--nodes", type=int, default=4)
        local.add_argument("--cpus-per-node", type=int, default=1)
        local.add_argument("--object-store", default="256M", help="object store per node (K/M/G)")
        local.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    put = with_address(verbs.add_parser("put", help="store a local file"))
    put.add_argument("local_path")
    put.add_argument("name")
    put.add_argument("--format", default="text", help="text, tsv, csv, gensort or kv")
    put.add_argument("--block-size", default="64M")
    with_address(verbs.add_parser("ls", help="list the files"))
    stat = with_address(verbs.add_parser("stat", help="a file's blocks and where they are"))
    stat.add_argument("name")
    get = with_address(verbs.add_parser("get", help="copy a file out to a local path"))
    get.add_argument("name")
    get.add_argument("local_path")
    rm = with_address(verbs.add_parser("rm", help="remove a file"))
    rm.add_argument("name")
    with_address(verbs.add_parser("nodes", help="the live nodes and what they hold"))
    job = with_address(verbs.add_parser("mr", help="run a built-in MapReduce job across the nodes"))
    job.add_argument("job", help="wordcount, ngram, inverted_index, kmer, grep, sort, sessionize")
    job.add_argument("inputs", nargs="+", help="files of the cluster's file system")
    job.add_argument("--output", required=True, help="the output's name: OUTPUT/part-PPPPP.tsv")
    job.add_argument("--partitions", type=int, help="default: one per node")
    job.add_argument("--output-format", default="text", help="text or binary")
    for flag, kind in [("n", int), ("k", int), ("pattern", str), ("gap-ms", int), ("vertices", int), ("damping", float)]:
        job.add_argument(f"--{flag}", type=kind, help="the job's parameter")
    sort = with_address(verbs.add_parser("sort", help="sort a gensort file across the nodes (2-IO)"))
    sort.add_argument("input")
    sort.add_argument("output")
    sort.add_argument("--memory", default="1G", help="each node's sort budget")
    return parser


def main(argv: List[str]) -> int:
    arguments = _parser().parse_args(argv)
    try:
        if arguments.verb == "local":
            return _local(arguments)
        if arguments.verb == _INSIDE:
            return _local_inside(arguments)
        return _on_cluster(arguments)
    except SpillwayError as error:
        print(f"spillway cluster: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _command(arguments: argparse.Namespace) -> List[str]:
    command = arguments.command[1:] if arguments.command[:1] == ["--"] else arguments.command
    if not command:
        raise SpillwayError("give the command to run after --: spillway cluster local -- COMMAND")
    return command


def _local(arguments: argparse.Namespace) -> int:
    command = _command(arguments)
    inside = [
        sys.executable, "-m", "spillway", "cluster", _INSIDE,
        "--nodes", str(arguments.nodes), "--cpus-per-node", str(arguments.cpus_per_node),
        "--object-store", arguments.object_store, "--", *command,
    ]  # fmt: skip
    if network.is_isolated():
        return subprocess.call(inside)
    return subprocess.call(network.isolated_command(inside))


def _local_inside(arguments: argparse.Namespace) -> int:
    from .cluster import local

    command = _command(arguments)
    with local(arguments.nodes, arguments.cpus_per_node, arguments.object_store) as cluster:
        environment = dict(os.environ, **{ADDRESS_VARIABLE: cluster.address, DIRECTORY_VARIABLE: str(cluster.directory)})
        return subprocess.call(command, env=environment)


def _on_cluster(arguments: argparse.Namespace) -> int:
    from .cluster import connect

    if not arguments.address or not arguments.dir:
        missing = " and ".join(
            flag for flag, value in [("--address", arguments.address), ("--dir", arguments.dir)] if not value
        )
        raise SpillwayError(f"{arguments.verb} needs {missing} (or run it under spillway cluster local -- ...)")
    cluster = connect(arguments.address, arguments.dir)
    result = _run(cluster, arguments)
    if arguments.json:
        print(json.dumps(result, indent=2))
    else:
        _print(arguments.verb, result)
    return 0


def _run(cluster, arguments: argparse.Namespace):
    verb = arguments.verb
    if verb == "put":
        return asdict(cluster.put(arguments.local_path, arguments.name, format=arguments.format, block_bytes=arguments.block_size))
    if verb == "get":
        return asdict(cluster.get(arguments.name, arguments.local_path))
    if verb == "stat":
        return asdict(cluster.stat(arguments.name))
    if verb == "rm":
        cluster.rm(arguments.name)
        return {"removed": arguments.name}
    if verb == "ls":
        return cluster.ls()
    if verb == "nodes":
        return cluster.nodes()
    if verb == "mr":
        params = {name: getattr(arguments, name) for name in ("n", "k", "pattern", "gap_ms", "vertices", "damping")}
        report = cluster.mapreduce(
            arguments.job,
            arguments.inputs,
            arguments.output,
            partitions=arguments.partitions,
            output_format=arguments.output_format,
            progress=_progress,
            **{name: value for name, value in params.items() if value is not None},
        )
        return asdict(report)
    if verb == "sort":
        report = cluster.sort(arguments.input, arguments.output, memory=arguments.memory, progress=_progress)
        return {**asdict(report), "reads_per_byte": report.reads_per_byte, "writes_per_byte": report.writes_per_byte}
    raise SpillwayError(f"unknown verb {verb}")


def _progress(phase: str, done: int, total: int) -> None:
    if sys.stderr.isatty():
        print(f"\r{phase}: {done}/{total} tasks", end="\n" if done == total else "", file=sys.stderr, flush=True)


def _print(verb: str, result) -> None:
    if verb == "ls":
        for name in result:
            print(name)
    elif verb == "nodes":
        for node in result:
            print(f"{node['name']}  {node['blocks']} blocks  {node['bytes']} bytes  {node['share']:.1%} of the ring  {node['id']}")
    elif verb in ("put", "get", "stat"):
        print(f"{result['name']}: {result['size']} bytes, {result['format']}, {len(result['blocks'])} blocks, replication {result['replication']}")
        if verb == "stat":
            for index, key, length, _, holders in result["blocks"]:
                print(f"  block {index}  {key:016x}  {length} bytes  on {', '.join(holders)}")
    elif verb == "mr":
        print(f"{result['job']}: {result['input_records']} records in, {result['output_records']} out, "
              f"{result['partitions']} partitions, {result['seconds']:.2f} s")
        for phase in result["phases"]:
            print(f"  {phase['name']:7} {phase['tasks']} tasks  {phase['seconds']:.2f} s  read {phase['bytes_read']} B  "
                  f"moved {phase['bytes_moved']} B  local {phase['local_tasks']}")
        for output in result["outputs"]:
            print(f"  {output}")
    elif verb == "sort":
        valsort = result["valsort"]
        print(f"{result['input']}: {result['records']} records in {result['ranges']} ranges, {result['seconds']:.2f} s; "
              f"sorted {valsort['sorted']}, checksum {valsort['checksum']}; "
              f"{result['reads_per_byte']:.2f} reads and {result['writes_per_byte']:.2f} writes per byte")
        for output in result["outputs"]:
            print(f"  {output['node']}: {output['directory']}")
    else:
        print(f"removed {result['removed']}")

