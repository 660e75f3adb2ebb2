"""cluster-*: Spillway on a simulated 4-node Ray cluster against the single-node engine on the same
data, Dask (LocalCluster, 4 workers of one thread) and Spark (local-cluster[4,1,1024], else local[2]),
every cluster inside a loopback-only network namespace."""

from __future__ import annotations

from declarations import Comparison, Contender, Metric, Requirement, Step, Target, Variant, Workload
from workloads.mr import MR_PEERS, mr_digest
from workloads.requirements import PIP_DUCKDB, PIP_PYSPARK

CLUSTER_PEERS = "{bench}/cluster_peers.py"
# The package with spillway.cluster and Ray, as scripts/install.sh makes it.
VENV_PYTHON = "{bench}/../.venv/bin/python"
# Every cluster runs here: a new network namespace with loopback alone.
ISOLATED = ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"]
PIP_DASK = Requirement(executable=None, source="pip", package="dask[distributed]", module="distributed")
PIP_DASK_DATAFRAME = Requirement(executable=None, source="pip", package="dask[dataframe,distributed]", module="pandas")
BUDGET = "1G"
# A peer's sort that runs longer fails (the page says so) rather than hold the benchmark.
PEER_SORT_LIMIT_S = 600

CLUSTER_METRICS = [
    Metric("throughput", "MB/s (job)", ["bytes / result.job_s / 1e6", "bytes / wall_s / 1e6"], digits=1),
    Metric("job_s", "job s", ["result.job_s", "wall_s"], better="lower"),
    Metric("start_s", "cluster start s", "result.start_s", better="lower"),
    Metric("load_s", "put s", "result.load_s", better="lower"),
    Metric("peak_memory_mib", "peak memory MiB (all processes)", ["result.peak_rss_bytes / 1048576", "peak_rss_kib / 1024"],
           better="lower", digits=0),
    Metric("repair_after_s", "repairs after the job s", "result.repair_after_s", better="lower"),
    Metric("moved_mb", "moved between nodes MB", "result.bytes_moved / 1e6", better=None, digits=1),
    Metric("locality", "tasks on local blocks %", "result.locality * 100", better="higher", digits=0),
    Metric("reads_per_byte", "reads per byte", "result.reads_per_byte", better="lower"),
    Metric("writes_per_byte", "writes per byte", "result.writes_per_byte", better="lower"),
]

NOTES = [
    (
        "Every cluster is simulated on this machine's 2 cores: 4 Ray nodes of one CPU each for Spillway, "
        "4 Dask workers of one thread, Spark's local-cluster of 4 executors of one core (or local[2] when "
        "local-cluster does not start from the pip package; the report's JSON says which). So the "
        "comparison with the single-node engine measures the cluster layer's overhead, not scale-out."
    ),
    (
        "Times: `job s` is the job alone; the cluster's start (`cluster start s`: for Spillway its Ray "
        "nodes and one first task on each, which starts a worker process, as Spark's start runs a first "
        "job) and, for Spillway, "
        "storing the input in its replicated file system (`put s`, three copies) are measured apart. "
        "Peak memory is the largest sum of the resident memory of every process of the run (sampled "
        "every 0.2 s), for the single-node engine its own peak RSS."
    ),
    (
        "A node lost halfway: the driver kills one simulated node (not the head) when half the map (or, "
        "for the sort, partition) tasks are done. Its tasks run again elsewhere, reading the surviving "
        "replicas, and Spillway's file system makes the lost copies again in the background while the "
        "job goes on; `repairs after the job s` is how long that went on after the job ended."
    ),
    (
        "Every engine's output is reduced to its line count and an order-free checksum of its lines and "
        "checked against the single-node engine's (bench/mr_peers.py digest); the sort's output is checked "
        "by valsort over the concatenated summaries of its ranges (order, record count, checksum)."
    ),
]


def isolated(*command: str) -> list[str]:
    return [*ISOLATED, *command]


def mr_cluster_workload(name: str, job: str, single_job: list[str], setup: list, input_name: str,
                        page_arguments: str) -> Workload:
    out = "{dir}/out"
    contenders = [
        Contender(
            name=f"spillway mr {job} (one node)",
            role="spillway",
            command=["{spillway}", "mr", *single_job, "{dir}/" + input_name, "-o", out + "-single",
                     "--memory", BUDGET, "--tmp", "{dir}/tmp", "--json"],
            prepare=[Step(command=["rm", "-rf", out + "-single"])],
            result="json",
            validate=[mr_digest(job, out + "-single", expect=False), Step(command=["rm", "-rf", out + "-single"])],
        ),
    ]
    for label, extra in [("", []), (", a node lost halfway", ["--lose-node"])]:
        contenders.append(
            Contender(
                name=f"spillway cluster {job} (4 nodes{label})",
                role="spillway",
                command=isolated(VENV_PYTHON, CLUSTER_PEERS, "spillway", job, "{dir}/" + input_name,
                                 out + "-cluster", "--tmp", "{dir}/tmp", *extra),
                prepare=[Step(command=["rm", "-rf", out + "-cluster", "{dir}/tmp/blocks"])],
                result="json-line",
                validate=[mr_digest(job, out + "-cluster", expect=True), Step(command=["rm", "-rf", out + "-cluster"])],
                cleanup=["{dir}/tmp/blocks"],
            )
        )
    for engine, label, requires in [("dask", "Dask (4 workers)", [PIP_DASK, PIP_DUCKDB]),
                                    ("spark", "Spark", [PIP_PYSPARK, PIP_DUCKDB])]:
        contenders.append(
            Contender(
                name=f"{label} {job}",
                role="peer",
                command=isolated("{python}", CLUSTER_PEERS, engine, job, "{dir}/" + input_name, f"{out}-{engine}",
                                 "--tmp", "{dir}/tmp"),
                result="json-line",
                validate=[mr_digest(job, f"{out}-{engine}", expect=True), Step(command=["rm", "-rf", f"{out}-{engine}"])],
                requires=requires,
                may_fail=True,
            )
        )
    cluster = f"spillway cluster {job} (4 nodes)"
    return Workload(
        name=name,
        page_command=f"python3 bench/run.py {name} {page_arguments}",
        description=f"{job} on a simulated 4-node cluster against the single-node engine, Dask and Spark.",
        setup=[["mkdir", "-p", "{dir}/tmp"], *setup],
        variants=[Variant(name="generated", description=f"{job} over generated Zipf text")],
        contenders=contenders,
        metrics=CLUSTER_METRICS,
        comparisons=[
            Comparison(label="the cluster layer's overhead", contender=cluster, peer=f"spillway mr {job} (one node)",
                       target=0.67 if job == "wordcount" else None),
            Comparison(label=job, contender=cluster, peer=f"Spark {job}", target=3.0 if job == "wordcount" else None),
            Comparison(label=job, contender=cluster, peer=f"Dask (4 workers) {job}",
                       target=2.0 if job == "wordcount" else None),
            Comparison(label="a node lost halfway", contender=f"spillway cluster {job} (4 nodes, a node lost halfway)",
                       peer=cluster, target=0.67),
        ],
        scratch_bytes_per_data_byte=6.0,
        notes=NOTES,
        cold=False,
    )


CLUSTER_WORDCOUNT = mr_cluster_workload(
    "cluster-wordcount", "wordcount", ["wordcount"],
    [["{spillway}", "gen", "text", "--bytes", "{bytes}", "-o", "{dir}/input.txt"]], "input.txt",
    page_arguments="--size 4G --runs 3",
)
CLUSTER_INDEX = mr_cluster_workload(
    "cluster-index", "index", ["inverted-index"],
    [
        ["{spillway}", "gen", "text", "--bytes", "{bytes}", "-o", "{dir}/text.txt"],
        ["{python}", MR_PEERS, "docs", "{dir}/text.txt", "{dir}/input.tsv"],
        ["rm", "{dir}/text.txt"],
    ],
    "input.tsv", page_arguments="--size 256M --runs 3",
)

def valsort_parts(directory: str) -> Step:
    """A peer's sorted part files, validated as one sorted file with the
    input's record count and checksum: a valsort summary per part, in name
    order, then valsort of the concatenated summaries."""
    script = (
        f'set -e; for part in {directory}/part-*.dat; do {{spillway}} valsort -q -o "$part.sum" "$part"; done; '
        f"cat {directory}/part-*.dat.sum > {directory}/all.sum; {{spillway}} valsort -s {directory}/all.sum"
    )
    return Step(command=["sh", "-c", script], expect_output=r"(?s)Records: {records}\b.*Checksum: {checksum}\b.*SUCCESS")


CLUSTER_SORT = Workload(
    name="cluster-sort",
    page_command="python3 bench/run.py cluster-sort --size 4G --runs 3",
    description=(
        "The 2-IO sort of gensort records on a simulated 4-node cluster (each node sorts one key range) "
        "against spillway sort on one node, Dask (`sort_values` on a dataframe of hex keys and records) and "
        "Spark (`binaryRecords` and `sortByKey`), with the cluster's reads and writes per byte."
    ),
    setup=[
        ["mkdir", "-p", "{dir}/tmp"],
        Step(command=["{spillway}", "gensort", "-c", "{records}", "{dir}/input.bin"],
             capture={"checksum": r"(?m)^([0-9a-f]+)\s*$"}),
    ],
    contenders=[
        Contender(
            name="spillway sort (one node)",
            role="spillway",
            command=["{spillway}", "sort", "{dir}/input.bin", "{dir}/sorted.bin", "--memory", BUDGET,
                     "--tmp", "{dir}/tmp", "--json"],
            result="json",
            validate=[Step(command=["{spillway}", "valsort", "{dir}/sorted.bin"], expect_output="SUCCESS")],
            cleanup=["{dir}/sorted.bin"],
        ),
        *[
            Contender(
                name=f"spillway cluster sort (4 nodes{label})",
                role="spillway",
                command=isolated(VENV_PYTHON, CLUSTER_PEERS, "spillway", "sort", "{dir}/input.bin", "{dir}/unused",
                                 "--tmp", "{dir}/tmp", "--memory", BUDGET, *extra),
                prepare=[Step(command=["rm", "-rf", "{dir}/tmp/blocks"])],
                result="json-line",
                expect_output='"sorted": true, "records": {records}, "checksum": "{checksum}"',
                cleanup=["{dir}/tmp/blocks"],
            )
            for label, extra in [("", []), (", a node lost halfway", ["--lose-node"])]
        ],
        *[
            Contender(
                name=f"{label} sort",
                role="peer",
                command=isolated("{python}", CLUSTER_PEERS, engine, "sort", "{dir}/input.bin", f"{{dir}}/out-{engine}",
                                 "--tmp", "{dir}/tmp", "--time-limit", str(PEER_SORT_LIMIT_S)),
                result="json-line",
                validate=[valsort_parts(f"{{dir}}/out-{engine}")],
                cleanup=[f"{{dir}}/out-{engine}"],
                requires=requires,
                may_fail=True,
            )
            for engine, label, requires in [("dask", "Dask (4 workers)", [PIP_DASK_DATAFRAME]),
                                            ("spark", "Spark", [PIP_PYSPARK])]
        ],
    ],
    metrics=CLUSTER_METRICS,
    comparisons=[
        Comparison(label="the cluster layer's overhead", contender="spillway cluster sort (4 nodes)",
                   peer="spillway sort (one node)", target=0.67),
        Comparison(label="sort", contender="spillway cluster sort (4 nodes)", peer="Spark sort"),
        Comparison(label="sort", contender="spillway cluster sort (4 nodes)", peer="Dask (4 workers) sort"),
        Comparison(label="a node lost halfway", contender="spillway cluster sort (4 nodes, a node lost halfway)",
                   peer="spillway cluster sort (4 nodes)", target=0.67),
    ],
    targets=[
        # 2.0 to a thousandth: the sample reads 10 bytes of each of 32,000
        # sampled records (0.00008 of 4 GiB), the summaries add 280 bytes a
        # partition; a 2-IO sort that staged its data anywhere would add 1.0.
        Target(label="reads per byte, cluster-wide (2.0 to a thousandth)", contender="spillway cluster sort (4 nodes)",
               metric="reads_per_byte", value=2.001),
        Target(label="writes per byte, cluster-wide (2.0 to a thousandth)", contender="spillway cluster sort (4 nodes)",
               metric="writes_per_byte", value=2.001),
    ],
    scratch_bytes_per_data_byte=6.0,
    notes=[
        *NOTES,
        (
            "Dask and Spark sort as their Python users would write it: Dask reads the file in 64 MiB pieces "
            "into a dataframe of hex keys and records and calls `sort_values` into 4 partitions; Spark reads "
            "`binaryRecords` and calls `sortByKey` into 4 partitions. Each writes its partitions as files, "
            "validated like ours (valsort summaries, record count, checksum). A peer's run still going after "
            f"{PEER_SORT_LIMIT_S} s is stopped, its processes killed, and reported failed with that reason; "
            "its later runs are skipped."
        ),
    ],
    cold=False,
)
