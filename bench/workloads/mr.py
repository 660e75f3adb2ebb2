"""mr-*: spillway mr's jobs against DuckDB, Polars, Spark local mode and a Unix pipeline, and against
spillway sort on the same number of bytes."""

from __future__ import annotations

from declarations import Comparison, Contender, Step, Variant, Workload
from workloads.requirements import (
    COREUTILS_SORT,
    COREUTILS_SYNC,
    COREUTILS_TR,
    PIP_DUCKDB,
    PIP_POLARS,
    PIP_PYSPARK,
)

MR_BUDGET = "1G"  # Spillway's --memory (binary units), the budget every engine gets
MR_PEERS = "{bench}/mr_peers.py"
MR_PEER_REQUIREMENTS = {"duckdb": [PIP_DUCKDB], "polars": [PIP_POLARS, PIP_DUCKDB], "spark": [PIP_PYSPARK, PIP_DUCKDB]}
MR_PEER_NAMES = {"duckdb": "DuckDB", "polars": "Polars", "spark": "Spark local[2]"}


def mr_digest(job: str, output: str, expect: bool, form: str = "tsv") -> Step:
    """Spillway's output digested and saved, or a peer's checked against it (see mr_peers.py digest)."""
    mode = ["--expect", "{dir}/expected.json"] if expect else ["--save", "{dir}/expected.json"]
    return Step(command=["{python}", MR_PEERS, "digest", job, output, "--format", form, *mode])


def mr_contenders(job: str, spillway_args: list[str], peer_args: list[str], unix: bool) -> list[Contender]:
    """Spillway's job first (its output is the reference), then the sort of the same bytes, then the peers."""
    out = "{dir}/out-spillway"
    contenders = [
        Contender(
            name=f"spillway mr {job}",
            role="spillway",
            command=[
                "{spillway}", "mr", *spillway_args, "{dir}/{input}", "-o", out, "--memory", MR_BUDGET,
                "--tmp", "{dir}/tmp", "--json",
            ],
            prepare=[Step(command=["rm", "-rf", out])],
            result="json",
            validate=[mr_digest(job, out, expect=False), Step(command=["rm", "-rf", out])],
        ),
        Contender(
            name="spillway sort (same bytes)",
            role="spillway",
            command=[
                "{spillway}", "sort", "{dir}/sort-input.bin", "{dir}/sort-output.bin", "--memory", MR_BUDGET,
                "--tmp", "{dir}/tmp", "--json",
            ],
            # gensort records as many bytes as the job's input holds (to within a record).
            prepare=[
                Step(command=[
                    "sh", "-c", "{spillway} gensort $(( $(stat -c %s {dir}/{input}) / 100 )) {dir}/sort-input.bin",
                ]),
            ],
            result="json",
            cleanup=["{dir}/sort-input.bin", "{dir}/sort-output.bin"],
        ),
    ]
    for engine in ("duckdb", "polars", "spark"):
        output = f"{{dir}}/out-{engine}"
        contenders.append(
            Contender(
                name=f"{MR_PEER_NAMES[engine]} {job}",
                role="peer",
                command=[
                    "{python}", MR_PEERS, engine, job, "{dir}/{input}", output, "--memory", "1GiB",
                    "--spark-memory", "1g", "--threads", "2", "--tmp", "{dir}/tmp", *peer_args,
                ],
                prepare=[Step(command=["rm", "-rf", output])],
                validate=[mr_digest(job, output, expect=True), Step(command=["rm", "-rf", output])],
                requires=MR_PEER_REQUIREMENTS[engine],
                may_fail=True,
            )
        )
    if unix:
        output = "{dir}/out-unix"
        contenders.append(
            Contender(
                name=f"Unix tr, sort, uniq -c {job}",
                role="peer",
                command=[
                    "sh", "-c",
                    "tr -s ' ' '\\n' < {dir}/{input} | LC_ALL=C sort -S " + MR_BUDGET + " --parallel=2 -T {dir}/tmp"
                    f" | uniq -c > {output} && sync --data {output}",
                ],
                validate=[mr_digest(job, output, expect=True, form="uniq"), Step(command=["rm", "-f", output])],
                requires=[COREUTILS_TR, COREUTILS_SORT, COREUTILS_SYNC],
                may_fail=True,
            )
        )
    return contenders


def mr_comparisons(job: str, unix: bool, duckdb_target: float | None = None) -> list[Comparison]:
    ours = f"spillway mr {job}"
    comparisons = [
        Comparison(label=job, contender=ours, peer=f"Spark local[2] {job}", target=5.0),
        Comparison(label=job, contender=ours, peer=f"DuckDB {job}", target=duckdb_target),
        Comparison(label=job, contender=ours, peer=f"Polars {job}"),
        # Themis ran its jobs at nearly TritonSort's speed: within 1.5x of the sort per byte.
        Comparison(label=f"{job} per byte, against the sort", contender=ours, peer="spillway sort (same bytes)",
                   target=0.67),
    ]
    if unix:
        comparisons.append(Comparison(label=job, contender=ours, peer=f"Unix tr, sort, uniq -c {job}", target=10.0))
    return comparisons


MR_NOTES = [
    (
        "Memory: Spillway gets `--memory 1G`, DuckDB `memory_limit='1GiB'`, Spark `spark.driver.memory=1g` "
        "(local mode: the driver runs the tasks), GNU sort `-S 1G`; Polars has no memory setting for its "
        "streaming engine. Every engine runs inside the same cgroup v1 memory limit (`--memory-limit`, "
        "stated at the top), page cache included."
    ),
    (
        "Threads: 2 for every engine (the machine has 2 cores): Spillway all cores, DuckDB `threads=2`, "
        "Polars `POLARS_MAX_THREADS` unset (it uses the 2 cores), Spark `local[2]`, GNU sort `--parallel=2`."
    ),
    (
        "Outputs: every engine writes the same tab-separated lines (Spillway's text output; the peers "
        "through bench/mr_peers.py) and makes them durable (fdatasync of the files and directory) before "
        "its clock stops. After every run an untimed check reduces the output to its line count and an "
        "order-free checksum of its lines (PageRank: the vertex count, the sum of ranks and the 20 "
        "highest-ranked vertices) and fails the benchmark unless it equals Spillway's."
    ),
    (
        "Peak RSS and CPU time come from GNU time around each command: for Spark they count only "
        "its Python driver, not the JVM that pyspark starts (the cgroup peak, which counts every "
        "process of the run and the page cache, includes it)."
    ),
    (
        "The sort row sorts gensort records of the job input's size with `spillway sort` under the same "
        "budget: the job's throughput over it is the job's speed per byte against the sort's (Themis ran "
        "its jobs at nearly TritonSort's speed; the target is within 1.5x)."
    ),
]


def mr_workload(name: str, job: str, description: str, setup: list[list[str] | Step], input_name: str,
                spillway_args: list[str], peer_args: list[str], unix: bool = False,
                duckdb_target: float | None = None, page_arguments: str = "") -> Workload:
    return Workload(
        name=name,
        page_command=f"python3 bench/run.py {name} {page_arguments}",
        description=description,
        setup=[["mkdir", "-p", "{dir}/tmp"], *setup],
        variants=[Variant(name="generated", params={"input": input_name}, description=description)],
        contenders=mr_contenders(job, spillway_args, peer_args, unix),
        comparisons=mr_comparisons(job, unix, duckdb_target),
        # The input, the sort's input and output, and an engine's intermediate data and output.
        scratch_bytes_per_data_byte=4.0,
        notes=MR_NOTES,
    )


GEN_TEXT = ["{spillway}", "gen", "text", "--bytes", "{bytes}", "-o", "{dir}/input.txt"]

MR_WORDCOUNT = mr_workload(
    "mr-wordcount", "wordcount",
    "Word count over Zipf-distributed text (`spillway gen text`, 100 000 words, exponent 1).",
    [GEN_TEXT], "input.txt", ["wordcount"], [], unix=True, duckdb_target=1.0,
    page_arguments="--size 4G --runs 1 --memory-limit 3G",
)
MR_NGRAM = mr_workload(
    "mr-ngram", "ngram",
    "5-gram count over Zipf-distributed text: every run of 5 words within a line.",
    [GEN_TEXT], "input.txt", ["ngram", "--n", "5"], ["--n", "5"],
    page_arguments="--size 1536M --runs 1 --memory-limit 3G",
)
MR_INDEX = mr_workload(
    "mr-index", "index",
    "Inverted index: every term of Zipf text and the sorted ids of the lines (documents) it appears in.",
    [
        ["{spillway}", "gen", "text", "--bytes", "{bytes}", "-o", "{dir}/text.txt"],
        ["{python}", MR_PEERS, "docs", "{dir}/text.txt", "{dir}/input.tsv"],
        ["rm", "{dir}/text.txt"],
    ],
    "input.tsv", ["inverted-index"], [],
    page_arguments="--size 1536M --runs 1 --size 256M --runs 1 --memory-limit 3G",
)
MR_SESSIONS = mr_workload(
    "mr-sessions", "sessions",
    "Click-log sessionization: clicks of 1M Zipf-distributed users (`spillway gen clicks`, about 34 bytes "
    "a click), cut into sessions at 30-minute pauses; one line per session.",
    [["sh", "-c", "{spillway} gen clicks --users 1M --clicks $(( {records} * 3 )) -o {dir}/input.tsv"]],
    "input.tsv", ["sessionize", "--gap", "1800000"], ["--gap", "1800000"],
    page_arguments="--size 1536M --runs 3 --memory-limit 3G",
)
MR_PAGERANK = mr_workload(
    "mr-pagerank", "pagerank",
    "PageRank, 3 iterations, on an R-MAT graph (`spillway gen rmat`, edge factor 16, a scale whose edge "
    "list is about the data size).",
    [
        Step(command=[
            "sh", "-c",
            "scale=$(awk 'BEGIN {{ print int(log({bytes} / 14 / 16) / log(2)) }}'); "
            "{spillway} gen rmat --scale $scale --edge-factor 16 -o {dir}/input.tsv && echo vertices=$((1 << scale))",
        ], capture={"vertices": r"vertices=(\d+)"}),
    ],
    "input.tsv", ["pagerank", "--vertices", "{vertices}", "--iterations", "3"],
    ["--vertices", "{vertices}", "--iterations", "3"],
    page_arguments="--size 1G --runs 1 --memory-limit 3G",
)
