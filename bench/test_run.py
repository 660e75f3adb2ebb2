"""Self-test of the benchmark harness on toy workloads (no spillway binary, no driver build).

Run with `python3 -m pytest bench/test_run.py`. It checks the harness's plumbing
and report files, never a timing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run
from declarations import (
    Agreement,
    Column,
    Comparison,
    Contender,
    DiskBound,
    LineChart,
    Metric,
    Probe,
    ProbeCommand,
    ProbeTarget,
    Step,
    Table,
    Target,
    Variant,
    Workload,
)
from measure import BenchmarkFailure


def invoke(workload: Workload, tmp_path: Path, sizes: int | list[int] = 1000, runs: int | list[int] = 1,
           **options) -> dict:
    """Runs the workload with the cache warm, its data and report under tmp_path."""
    return run.run_workload(workload, run.Invocation(
        sizes=[sizes] if isinstance(sizes, int) else sizes,
        runs=[runs] if isinstance(runs, int) else runs,
        base_dir=tmp_path / "data",
        out_dir=tmp_path / "out",
        drop_cache=False,
        **options,
    ))

TOY = Workload(
    name="toy",
    description="Write zeros with head and with dd, then read them back with cat.",
    contenders=[
        Contender(
            name="head write",
            role="spillway",
            command=["sh", "-c", "head -c {bytes} /dev/zero > {dir}/head.dat"],
            writes="{dir}/head.dat",
        ),
        Contender(
            name="dd write",
            role="peer",
            command=["dd", "if=/dev/zero", "of={dir}/dd.dat", "bs=64k", "count={bytes}", "iflag=count_bytes"],
            writes="{dir}/dd.dat",
        ),
        Contender(name="cat read", role="peer", command=["cat", "{dir}/head.dat"]),
    ],
    comparisons=[Comparison(label="write", contender="head write", peer="dd write", target=0.5)],
)


def test_toy_workload_writes_reports(tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    report = invoke(TOY, tmp_path, 2**20, 2)

    saved = json.loads((out_dir / "toy.json").read_text())
    assert saved["workload"] == "toy" and saved["schema"] == "spillway-bench/2" and saved["complete"]
    (part,) = saved["parts"]
    assert part["records"] == 2**20 // 100
    assert part["data_bytes"] == (2**20 // 100) * 100
    assert saved["cache"] == "warm"
    assert saved["machine"]["cpu_cores"] >= 1
    assert saved["spillway"] is None and saved["builds"] == []
    assert saved["source"]["commit"] and saved["reproduce"] == "python3 bench/run.py toy --size 1M --runs 2"
    contenders = {entry["name"]: entry for entry in part["contenders"]}
    assert list(contenders) == ["head write", "dd write", "cat read"]
    for entry in contenders.values():
        assert [r["round"] for r in entry["runs"]] == [0, 1]
        for measured in entry["runs"]:
            assert measured["exit_code"] == 0
            assert measured["wall_s"] > 0
            assert measured["peak_rss_kib"] > 0
            assert measured["metrics"]["throughput"] > 0
        summary = entry["summary"]
        assert summary["wall_s"]["min"] <= summary["wall_s"]["median"] <= summary["wall_s"]["max"]
        assert len(summary["throughput"]["values"]) == 2
    # /proc/<pid>/io of the child (a shell counts the children it reaped) saw the bytes.
    assert contenders["dd write"]["runs"][0]["wchar"] >= part["data_bytes"]
    assert contenders["head write"]["runs"][0]["wchar"] >= part["data_bytes"]
    assert contenders["cat read"]["runs"][0]["rchar"] >= part["data_bytes"]

    (comparison,) = part["comparisons"]
    head_median = contenders["head write"]["summary"]["throughput"]["median"]
    dd_median = contenders["dd write"]["summary"]["throughput"]["median"]
    assert comparison["ratio"] == pytest.approx(head_median / dd_median)
    assert len(comparison["per_round_ratios"]) == 2
    assert comparison["verdict"] in ("met", "missed", "within noise")
    assert report["parts"][0]["comparisons"][0]["ratio"] == comparison["ratio"]

    markdown = (out_dir / "toy.md").read_text()
    assert "| head write |" in markdown and "head write / dd write" in markdown
    assert "python3 bench/run.py toy --size 1M --runs 2" in markdown and "commit" in markdown
    # Medians with the spread of the runs.
    assert re.search(r"\| head write \| [0-9,]+ \([0-9,]+–[0-9,]+\) \|", markdown)
    assert (out_dir / "toy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "[toy](toy.md)" in (out_dir / "README.md").read_text()
    # The scratch data directory is gone afterwards.
    assert not (tmp_path / "data").exists()


def test_failing_contender_fails_loudly(tmp_path: Path) -> None:
    broken = Workload(
        name="broken",
        description="A contender that exits non-zero.",
        contenders=[Contender(name="false", role="peer", command=["sh", "-c", "echo oops >&2; exit 3"])],
        comparisons=[],
    )
    with pytest.raises(BenchmarkFailure, match=r"exit code 3[\s\S]*oops"):
        invoke(broken, tmp_path)
    assert not (tmp_path / "out" / "broken.json").exists()


def test_a_peer_that_may_fail_is_reported_failed_and_the_rest_measured(tmp_path: Path) -> None:
    flaky = Workload(
        name="flaky",
        description="A peer that runs out of memory on its second round.",
        contenders=[
            Contender(name="ours", role="spillway", command=["sh", "-c", "head -c {bytes} /dev/zero > /dev/null"]),
            Contender(
                name="steady",
                role="peer",
                command=["sh", "-c", "head -c {bytes} /dev/zero > /dev/null"],
                may_fail=True,
            ),
            Contender(
                name="greedy",
                role="peer",
                command=[
                    "sh", "-c",
                    "if [ -e {dir}/ran ]; then echo 'Out of Memory Error: 1.0 GiB used' >&2; exit 1; fi; touch {dir}/ran",
                ],
                may_fail=True,
            ),
        ],
        comparisons=[
            Comparison(label="go", contender="ours", peer="steady"),
            Comparison(label="go", contender="ours", peer="greedy", target=5.0),
        ],
    )
    invoke(flaky, tmp_path, runs=2)
    (part,) = json.loads((tmp_path / "out" / "flaky.json").read_text())["parts"]
    assert [entry["name"] for entry in part["contenders"]] == ["ours", "steady"]
    assert [c["peer"] for c in part["comparisons"]] == ["steady"]
    (failure,) = part["failed"]
    assert failure["name"] == "greedy"
    assert "Out of Memory Error" in failure["reason"]
    assert failure["comparisons"][0]["target"] == 5.0
    markdown = (tmp_path / "out" / "flaky.md").read_text()
    assert "greedy failed, so it has no ratio: " in markdown and "no ratio: the peer failed" in markdown
    # A contender that may not fail still stops the benchmark.
    strict = Workload(
        name="strict",
        description="The same failure, not allowed.",
        contenders=[Contender(name="greedy", role="peer", command=["sh", "-c", "exit 1"])],
        comparisons=[],
    )
    with pytest.raises(BenchmarkFailure):
        invoke(strict, tmp_path)


def test_wrong_output_size_fails(tmp_path: Path) -> None:
    short = Workload(
        name="short",
        description="A writer that writes too little.",
        contenders=[Contender(name="short", role="peer", command=["sh", "-c", "echo x > {dir}/a"], writes="{dir}/a")],
        comparisons=[],
    )
    with pytest.raises(BenchmarkFailure, match="expected 1000"):
        invoke(short, tmp_path)


def test_list_command() -> None:
    listing = subprocess.run(
        [sys.executable, str(Path(run.__file__)), "--list"], capture_output=True, text=True, check=True
    ).stdout
    for name in ("gensort", "sort", "mr-wordcount", "agg", "kv", "stream"):
        assert f"\n{name} " in "\n" + listing
    assert "page: python3 bench/run.py kv " in listing


def test_accepted_exit_code_needs_expected_output(tmp_path: Path) -> None:
    def workload(script: str) -> Workload:
        checker = Contender(
            name="checker",
            role="peer",
            command=["sh", "-c", script],
            exit_codes=[0, 1],
            expect_output=r"(?m)^Records: {records}$",
        )
        return Workload(name="checker", description="valsort-like exit codes", contenders=[checker], comparisons=[])

    report = invoke(workload("echo 'Records: 10' >&2; exit 1"), tmp_path)
    assert report["parts"][0]["contenders"][0]["runs"][0]["exit_code"] == 1
    with pytest.raises(BenchmarkFailure, match="without printing"):
        invoke(workload("echo 'Records: 9'; exit 1"), tmp_path)
    with pytest.raises(BenchmarkFailure, match="exit code 2"):
        invoke(workload("echo 'Records: 10'; exit 2"), tmp_path)


def test_refuses_data_inside_the_repository(tmp_path: Path) -> None:
    inside = run.REPO_ROOT / "bench" / "not-here"
    if not (run.REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    with pytest.raises(BenchmarkFailure, match="inside the repository"):
        run.run_workload(TOY, run.Invocation(sizes=[1000], runs=[1], base_dir=inside, out_dir=tmp_path / "out"))
    assert not inside.exists()


def parts_workload(validate_script: str = "cmp {dir}/copy.dat {dir}/input.dat") -> Workload:
    """Two variants with their own setup, a captured placeholder, validation, cleanup and a disk bound."""

    def variant(name: str, byte: str) -> Variant:
        return Variant(
            name=name,
            description=f"{name} bytes",
            params={"byte": byte},
            setup=[
                Step(
                    command=["sh", "-c", "head -c {bytes} /dev/zero | tr '\\0' '{byte}' > {dir}/input.dat; echo sum=$(cksum < {dir}/input.dat | cut -d' ' -f1) >&2"],
                    capture={"sum": r"sum=(\d+)"},
                )
            ],
        )

    return Workload(
        name="parts",
        description="Copy a file with cp and with cat, checked with cmp and cksum.",
        variants=[variant("zeros", "0"), variant("ones", "1")],
        contenders=[
            Contender(
                name="cp copy",
                role="spillway",
                command=["cp", "{dir}/input.dat", "{dir}/copy.dat"],
                writes="{dir}/copy.dat",
                prepare=[Step(command=["sh", "-c", "echo prepared > {dir}/marker"])],
                validate=[
                    Step(command=["sh", "-c", validate_script]),
                    Step(command=["sh", "-c", "cksum < {dir}/copy.dat"], expect_output=r"^{sum} "),
                ],
                cleanup=["{dir}/copy.dat", "{dir}/marker"],
            ),
            Contender(
                name="cat copy",
                role="peer",
                command=["sh", "-c", "cat {dir}/input.dat > {dir}/cat.dat"],
                writes="{dir}/cat.dat",
                output_size_exact=False,
            ),
            Contender(name="cat read", role="peer", command=["cat", "{dir}/input.dat"]),
        ],
        comparisons=[
            Comparison(label="copy", contender="cp copy", peer="cat copy", target=0.01),
            # Out of reach of any copy: the report must say the disk forbids it.
            Comparison(label="copy", contender="cp copy", peer="cat read", target=1e9),
        ],
        disk_bound=DiskBound(
            read="cat read",
            write="cat copy",
            memory_budget_bytes=1500,
            contenders=["cp copy"],
            targets={"cp copy": 0.0},
            read_write="cat copy",
        ),
    )


def test_sizes_and_variants_make_parts(tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    report = invoke(parts_workload(), tmp_path, [1000, 2000], [2, 1])
    saved = json.loads((out_dir / "parts.json").read_text())
    assert [part["label"] for part in saved["parts"]] == [
        "zeros, 1000 B", "ones, 1000 B", "zeros, 1.95 KiB", "ones, 1.95 KiB",
    ]
    assert [part["captured"]["sum"] for part in saved["parts"]] == [part["captured"]["sum"] for part in report["parts"]]
    assert [part["runs_per_contender"] for part in saved["parts"]] == [2, 2, 1, 1]
    first, _, large, _ = saved["parts"]
    assert first["disk_bound"]["in_memory"] and first["disk_bound"]["passes"] == 1
    assert first["disk_bound"]["targets"] == {}
    assert large["disk_bound"]["passes"] == 2
    assert large["disk_bound"]["targets"]["cp copy"]["met"] is True
    assert first["disk_bound"]["overlapped"] is None
    assert first["disk_bound"]["floor_s"] == first["disk_bound"]["limit_s"]
    cat_copy = next(c for c in large["contenders"] if c["name"] == "cat copy")
    overlapped = large["disk_bound"]["overlapped"]
    assert overlapped["limit_s"] == 2 * cat_copy["summary"]["wall_s"]["median"]
    assert large["disk_bound"]["floor_s"] == overlapped["limit_s"]
    assert set(overlapped["fractions"]) == {"cp copy"}
    cp = first["contenders"][0]
    assert len(cp["runs"][0]["validation"]) == 2
    assert first["setup"][0]["exit_code"] == 0
    assert report["parts"][0]["comparisons"][0]["ratio"] > 0
    markdown = (out_dir / "parts.md").read_text()
    assert "## zeros, 1000 B" in markdown and "## Summary" in markdown and "of disk-bound limit" in markdown
    assert "Overlapped limit" in markdown
    assert "so no 2-IO sort reaches it on this disk" in markdown
    assert (out_dir / "parts.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    index = (out_dir / "README.md").read_text()
    assert "ones, 1.95 KiB" in index
    assert not (tmp_path / "data").exists()


def test_output_that_does_not_validate_fails_loudly(tmp_path: Path) -> None:
    with pytest.raises(BenchmarkFailure, match="OUTPUT DID NOT VALIDATE: cp copy"):
        invoke(parts_workload("exit 1"), tmp_path)
    assert not (tmp_path / "out" / "parts.json").exists()
    assert not (tmp_path / "data").exists()


def driver_workload() -> Workload:
    """Contenders that print JSON results (as the drivers do), in groups, with targets, agreements and a probe."""

    def printer(name: str, role: str, group: str, ops: str, hits: str = "7", **options) -> Contender:
        store = "{dir}/store-" + name.replace(" ", "-")
        script = (
            f"mkdir -p {store}; head -c 4096 /dev/zero > {store}/f; echo noise; "
            + "printf '{{\"ops\": %s, \"hits\": %s, \"lat\": {{\"p99\": 5}}}}\\n' "
            + f"{ops} {hits}"
        )
        return Contender(name=name, role=role, group=group, command=["sh", "-c", script], result="json-line",
                         output_dir=store, cleanup=[store], **options)

    return Workload(
        name="drivers",
        description="Drivers printing JSON lines.",
        size_unit="records",
        record_bytes=None,
        params={"reads": "10"},
        contenders=[
            printer("ours fill", "spillway", "fill", "{reads}0"),
            printer("theirs fill", "peer", "fill", "$(( {reads} * 5 ))", cold=False),
            printer("ours read", "spillway", "read", "3"),
            printer("theirs read", "peer", "read", "3"),
        ],
        metrics=[
            Metric("ops", "ops/s", "result.ops", digits=0),
            Metric("p99", "p99", "result.lat.p99", better="lower"),
            Metric("store_kib", "store KiB", "output_dir_bytes / 1024", better="lower", groups=["fill"]),
            Metric("per_record", "ops per record", "result.ops / records", groups=["fill"]),
        ],
        tables=[Table("Fill", group="fill", metrics=["ops", "store_kib", "per_record"]),
                Table("Read", group="read", metrics=["ops", "p99"], chart=False)],
        comparisons=[Comparison("fill", "ours fill", "theirs fill", target=1.5),
                     Comparison("read", "ours read", "theirs read", metric="ops")],
        targets=[Target("p99", "ours read", "p99", 10.0)],
        agreements=[Agreement("hits", ["ours read", "theirs read"], ["result.hits"])],
        probes=[Probe(name="shares", title="Shares", columns=[Column("kind", "kind", 0), Column("share", "share", 1, "%")],
                      commands=[ProbeCommand(["sh", "-c", "echo '{{\"kind\": \"a\", \"share\": 4.5}}'; "
                                                          "echo '{{\"kind\": \"b\", \"share\": 9}}'"],
                                             where={"kind": "a"})])],
        variants=[Variant(name="one", targets=[ProbeTarget("share of a", "shares", {"kind": "a"}, "share", 5.0)]),
                  Variant(name="two")],
    )


def test_json_results_make_metrics_tables_targets_agreements_and_probes(tmp_path: Path) -> None:
    report = invoke(driver_workload(), tmp_path, 50, 2, params={"reads": "2k"})
    one, two = report["parts"]
    assert one["label"] == "one, 50 records" and report["invocation"]["params"] == {"reads": "2000"}
    fill = {c["name"]: c for c in one["contenders"]}
    assert fill["ours fill"]["summary"]["ops"]["median"] == 20_000
    assert fill["ours fill"]["summary"]["per_record"]["median"] == 400
    assert fill["ours fill"]["summary"]["store_kib"]["median"] == 4.0
    assert "store_kib" not in fill["ours read"]["summary"]  # a metric of the fill group only
    assert fill["theirs fill"]["cold"] is False and fill["ours fill"]["cold"] is True
    assert not list((tmp_path / "data").glob("*/store-*"))  # cleaned up, directories too
    (fill_ratio, read_ratio) = one["comparisons"]
    assert fill_ratio["ratio"] == 2.0 and fill_ratio["verdict"] == "met"
    assert read_ratio["ratio"] == 1.0 and read_ratio["verdict"] is None and not read_ratio["loss"]
    assert [target["label"] for target in one["targets"]] == ["share of a", "p99"]
    assert one["targets"][1]["verdict"] == "met" and one["targets"][1]["values"] == [5.0, 5.0]
    assert [target["label"] for target in two["targets"]] == ["p99"]  # the probe target is variant one's
    assert one["probes"]["shares"] == [{"kind": "a", "share": 4.5}]
    assert one["agreements"][0]["value"] == {"result.hits": 7}
    markdown = (tmp_path / "out" / "drivers.md").read_text()
    assert "### Fill" in markdown and "### Read" in markdown and "## Shares" in markdown
    assert "| one, 50 records | a | 4.5% |" in markdown
    assert "share of a (probe shares, one deterministic run)" in markdown
    assert "`reads=2000`" in markdown


def test_results_that_disagree_stop_the_benchmark_and_keep_the_parts_before(tmp_path: Path) -> None:
    workload = driver_workload()
    workload.contenders[3].command = ["sh", "-c", "echo '{{\"ops\": 1, \"hits\": {records}}}'"]
    with pytest.raises(BenchmarkFailure, match=r"RESULTS DISAGREE on one, 9 records \(hits\)"):
        invoke(workload, tmp_path, 9)
    assert not (tmp_path / "out" / "drivers.json").exists()
    # The second part disagrees: the first is kept, in a report marked incomplete.
    workload.contenders[3].command = ["sh", "-c", "case {dir} in *two*) hits=8;; *) hits=7;; esac; "
                                      "echo '{{\"ops\": 1, \"hits\": '$hits'}}'"]
    with pytest.raises(BenchmarkFailure, match="RESULTS DISAGREE on two"):
        invoke(workload, tmp_path, 7)
    saved = json.loads((tmp_path / "out" / "drivers.json").read_text())
    assert [part["label"] for part in saved["parts"]] == ["one, 7 records"] and not saved["complete"]
    assert "**INCOMPLETE: the benchmark stopped after 1 of its 2 parts" in (tmp_path / "out" / "drivers.md").read_text()


def test_selection_of_variants_and_contenders(tmp_path: Path) -> None:
    report = invoke(driver_workload(), tmp_path, 5, 1, variants=["two"], skip=["theirs"])
    (part,) = report["parts"]
    assert part["label"] == "two, 5 records"
    assert [c["name"] for c in part["contenders"]] == ["ours fill", "ours read"]
    assert part["comparisons"] == [] and report["invocation"]["contenders_left_out"] == ["theirs fill", "theirs read"]
    with pytest.raises(BenchmarkFailure, match="no variant"):
        invoke(driver_workload(), tmp_path, 5, 1, variants=["three"])
    with pytest.raises(BenchmarkFailure, match="no param"):
        invoke(driver_workload(), tmp_path, 5, 1, params={"writes": "1"})
    with pytest.raises(BenchmarkFailure, match="leave no contender"):
        invoke(driver_workload(), tmp_path, 5, 1, only=["nobody"])


def test_main_reports_the_command_as_typed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(run.WORKLOADS, "drivers", driver_workload())
    arguments = ["drivers", "--size", "3", "--runs", "1", "--variant", "one", "--warm", "--set", "reads=5",
                 "--dir", str(tmp_path / "data"), "--out", str(tmp_path / "out")]
    assert run.main(arguments) == 0
    saved = json.loads((tmp_path / "out" / "drivers.json").read_text())
    assert saved["reproduce"] == "python3 bench/run.py " + " ".join(arguments)
    assert run.main(["drivers", "--size", "3", "--runs", "1", "--runs", "2"]) == 2
    assert run.main(["nothing"]) == 2


def test_the_index_lists_the_pages_measured_on_a_gpu(tmp_path: Path) -> None:
    import report

    def row(data: str, dims: int, psb: float, brute: float) -> dict:
        rates = {"spillway-psb": {"queries_per_s": psb}, "spillway-brute": {"queries_per_s": brute}}
        return {"distribution": data, "dims": dims, "k": 10, "contenders": rates}

    page = {"harness": report.GPU_HARNESS, "generated_at": "2026-11-27T16:33:00Z", "source": "abc1234",
            "machine": {"gpu": "Some GPU"}, "args": {"runs": "3"},
            "results": [row("uniform", 2, 2e7, 1e6), row("clustered", 16, 1e6, 5e5)]}
    (tmp_path / "knn-gpu.json").write_text(json.dumps(page))
    report.write_index(tmp_path)
    index = (tmp_path / "README.md").read_text()
    assert ("| [knn-gpu](knn-gpu.md) | Some GPU | spillway-psb / spillway-brute (uniform, d = 2, k = 10): **20.00** "
            "| 2 met, 1 missed | 3 | 2026-11-27 | abc1234 |") in index
    assert "one run of `bench/knn_gpu.py` there" in index
    from knn_gpu import targets

    page["results"][0].update(queries=10_000, contenders={**page["results"][0]["contenders"]})
    page["results"][0]["contenders"]["spillway-psb"]["kernel_s"] = 2.5e-4
    assert targets(page["results"])[0] == ("- uniform, d = 2, k = 10: PSB 20,000,000 queries/s, its kernel alone "
                                           "40,000,000 (target 10^7: met), 20.0x our brute force (target 10x: met)")


class FakeCgroups:
    """Stands in for measure's cgroup v1 helpers (which need root): a group is a directory, a run's peak 3 MiB."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.created: list[tuple[int, str]] = []
        self.removed: list[str] = []

    def create(self, limit_bytes: int, suffix: str = "") -> Path:
        group = self.root / ("group" + (f"-{suffix}" if suffix else ""))
        group.mkdir(parents=True)
        (group / "memory.limit_in_bytes").write_text(str(limit_bytes))
        self.created.append((limit_bytes, suffix))
        return group

    def remove(self, group: Path) -> None:
        self.removed.append(group.name)
        (group / "memory.limit_in_bytes").unlink()
        group.rmdir()


def fake_cgroups(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeCgroups:
    cgroups = FakeCgroups(tmp_path / "cgroups")
    monkeypatch.setattr(run, "create_memory_cgroup", cgroups.create)
    monkeypatch.setattr(run, "remove_memory_cgroup", cgroups.remove)
    monkeypatch.setattr(run, "joiner", lambda group: None)
    monkeypatch.setattr(run, "reset_cgroup_peak", lambda group: None)
    monkeypatch.setattr(run, "cgroup_peak_bytes", lambda group: 3 * 2**20)
    return cgroups


def limits_workload() -> Workload:
    """Two variants with memory limits of their own; a contender that prints the memory placeholders, and a
    peer that is SIGKILLed (as the OOM killer would) under the smaller limit."""
    placeholders = "'{{\"limit\": {memory_limit_bytes}, \"mib\": {memory_limit_mib}, \"budget\": {memory_budget_mib}}}'"
    return Workload(
        name="limits",
        description="The same work under two memory limits.",
        size_unit="records",
        record_bytes=None,
        variants=[Variant(name="big", memory_limit="64M"), Variant(name="small", memory_limit="16M")],
        contenders=[
            Contender(name="ours", role="spillway", result="json-line", command=["sh", "-c", f"echo {placeholders}"]),
            Contender(name="greedy", role="peer", result="json-line", may_fail=True,
                      command=["sh", "-c", "if [ {memory_limit_mib} -lt 32 ]; then kill -9 $$; fi; "
                                           "echo '{{\"budget\": 1}}'"]),
        ],
        metrics=[Metric("budget_mib", "budget MiB", "result.budget", better=None, digits=0)],
        comparisons=[Comparison(label="time", contender="ours", peer="greedy", metric="wall_s", target=1e9)],
        line_chart=LineChart(metric="wall_s", x_label="limit, MiB", x_values={"big": 64.0, "small": 16.0},
                             x_log2=True),
    )


def test_a_variant_with_a_memory_limit_runs_in_a_cgroup_of_its_own(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    cgroups = fake_cgroups(monkeypatch, tmp_path)
    report = invoke(limits_workload(), tmp_path, 10, memory_limit_bytes=2**30)
    # The invocation's group, and one per part, each removed after its part; the invocation's last.
    assert cgroups.created == [(2**30, ""), (64 * 2**20, "part-1"), (16 * 2**20, "part-2")]
    assert cgroups.removed == ["group-part-1", "group-part-2", "group"]
    big, small = report["parts"]
    assert [big["memory_limit_bytes"], small["memory_limit_bytes"]] == [64 * 2**20, 16 * 2**20]
    ours = big["contenders"][0]
    # The limit in bytes and MiB, and the budget: 80% of the MiB, rounded down.
    assert ours["runs"][0]["result"] == {"limit": 64 * 2**20, "mib": 64, "budget": 51}
    assert small["contenders"][0]["runs"][0]["result"] == {"limit": 16 * 2**20, "mib": 16, "budget": 12}
    assert ours["runs"][0]["cgroup_peak_bytes"] == 3 * 2**20 and ours["summary"]["cgroup_peak_mib"]["median"] == 3
    # SIGKILL under a limit: exit 137 from GNU time, reported as the OOM killer's likely work.
    assert [c["name"] for c in small["contenders"]] == ["ours"]
    (failure,) = small["failed"]
    assert failure["name"] == "greedy" and failure["role"] == "peer"
    assert "exit code 137: killed (out of memory under the 16.00 MiB cgroup limit?)" in failure["reason"]
    markdown = (tmp_path / "out" / "limits.md").read_text()
    assert "every run inside a cgroup v1 memory limit of 64.00 MiB (page cache included)" in markdown
    assert "1.00 GiB (page cache included), except in the parts that name a limit of their own" in markdown
    assert "greedy failed, so it has no ratio: greedy failed with exit code 137: killed" in markdown
    assert "| greedy failed | 1e+09x | no ratio: the peer failed |" in markdown
    assert "![time s against limit, MiB" in markdown and "(limits-lines.png)" in markdown
    assert "Failed (an x on the chart): greedy at 16 (limit, MiB)." in markdown
    assert (tmp_path / "out" / "limits-lines.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_part_cgroup_is_removed_when_the_part_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cgroups = fake_cgroups(monkeypatch, tmp_path)
    workload = limits_workload()
    workload.contenders[1].may_fail = False
    with pytest.raises(BenchmarkFailure, match=r"greedy failed with exit code 137: killed \(out of memory under"):
        invoke(workload, tmp_path, 10)
    assert cgroups.created == [(64 * 2**20, "part-1"), (16 * 2**20, "part-2")]
    assert cgroups.removed == ["group-part-1", "group-part-2"]
    assert not list((tmp_path / "cgroups").iterdir())


def test_memory_placeholders_need_a_limit_in_every_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_cgroups(monkeypatch, tmp_path)
    workload = limits_workload()
    workload.variants.append(Variant(name="unlimited", setup=[["sh", "-c", "echo setup ran >&2; exit 1"]]))
    # Before any setup runs (the unlimited variant's setup would fail with another message).
    with pytest.raises(BenchmarkFailure, match=r"templates use \{memory_limit_bytes\}, \{memory_limit_mib\}, "
                                               r"\{memory_budget_mib\}, but unlimited would run without"):
        invoke(workload, tmp_path, 10)
    # An invocation's limit serves the parts without one of their own.
    workload.variants[2].setup = []
    report = invoke(workload, tmp_path, 10, memory_limit_bytes=2**30)
    unlimited = report["parts"][2]
    assert unlimited["memory_limit_bytes"] == 2**30
    assert unlimited["contenders"][0]["runs"][0]["result"]["budget"] == 819


def test_the_line_chart_is_redrawn_from_the_json_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import report as reports

    fake_cgroups(monkeypatch, tmp_path)
    invoke(limits_workload(), tmp_path, 10, runs=2)
    saved = json.loads((tmp_path / "out" / "limits.json").read_text())
    assert saved["line_chart"] == {"metric": "wall_s", "x_label": "limit, MiB", "x_values": {"big": 64.0, "small": 16.0},
                                   "x_log2": True}
    series = reports.line_series(saved)
    assert [x for x, *_ in series["ours"]["points"]] == [16.0, 64.0] and series["ours"]["failed"] == []
    assert series["greedy"]["role"] == "peer" and series["greedy"]["failed"] == [16.0]
    assert [x for x, *_ in series["greedy"]["points"]] == [64.0]
    x, median, low, high = series["ours"]["points"][0]
    assert low <= median <= high

    # Drawn again elsewhere from the JSON: the figure has the x marker where greedy failed, named in its legend.
    pyplot = reports.import_pyplot()
    figures = []
    monkeypatch.setattr(pyplot, "close", figures.append)
    reports.write_reports(saved, tmp_path / "again")
    assert (tmp_path / "again" / "limits-lines.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (axes,) = figures[-1].axes
    legend = [text.get_text() for text in axes.get_legend().get_texts()]
    assert legend == ["ours", "greedy (failed at 16)"]
    (marks,) = [c for c in axes.collections if len(c.get_offsets()) and c.get_offsets()[0][0] == 16.0
                and c.get_offsets()[0][1] > max(p[3] for line in series.values() for p in line["points"])]
    assert axes.get_xscale() == "log" and "lower is better" in axes.get_ylabel()
    assert len(marks.get_offsets()) == 1
    monkeypatch.undo()
    for figure in figures:
        pyplot.close(figure)


def test_a_line_chart_of_contenders_that_only_failed_is_still_drawn(tmp_path: Path) -> None:
    import report as reports

    saved = {
        "workload": "failing", "memory_limit_bytes": None,
        "metrics": [{"name": "wall_s", "label": "time s", "better": "lower", "scale": 1.0, "digits": 2}],
        "line_chart": {"metric": "wall_s", "x_label": "limit, MiB", "x_values": {"a": 256.0, "b": 512.0}, "x_log2": True},
        "parts": [
            {"size": 10, "label": f"{name}, 10 records", "runs_per_contender": 1, "variant": {"name": name},
             "contenders": [], "failed": [{"name": "spillway-x", "role": "spillway", "reason": "killed"}]}
            for name in ("a", "b")
        ],
    }
    reports.write_line_chart(saved, tmp_path / "failing-lines.png")
    assert (tmp_path / "failing-lines.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert reports.line_failures(saved) == {"spillway-x": [256.0, 512.0]}


def memory_cgroups_usable() -> bool:
    root = Path("/sys/fs/cgroup/memory")
    return os.geteuid() == 0 and (root / "memory.limit_in_bytes").exists() and os.access(root, os.W_OK)


@pytest.mark.skipif(not memory_cgroups_usable(), reason="needs root and the cgroup v1 memory controller")
def test_a_contender_over_a_real_cgroup_limit_is_killed_and_reported(tmp_path: Path) -> None:
    allocate = [sys.executable, "-c", "data = b'x' * (256 << 20); print(len(data))"]
    workload = Workload(
        name="oom",
        description="A process that needs 256 MiB under a 32 MiB limit.",
        size_unit="records",
        record_bytes=None,
        variants=[Variant(name="tight", memory_limit="32M")],
        contenders=[
            Contender(name="small", role="spillway", command=["sh", "-c", "echo {memory_budget_mib}"]),
            Contender(name="large", role="peer", command=allocate, may_fail=True),
        ],
        comparisons=[],
    )
    report = invoke(workload, tmp_path, 10)
    (part,) = report["parts"]
    (failure,) = part["failed"]
    assert "killed (out of memory under the 32.00 MiB cgroup limit?)" in failure["reason"]
    small = part["contenders"][0]
    assert 0 < small["runs"][0]["cgroup_peak_bytes"] <= 32 * 2**20
    assert not list(Path("/sys/fs/cgroup/memory").glob(f"spillway-bench-{os.getpid()}*"))


def process_gone(pid: int) -> bool:
    """No such process, or only its zombie (dead, waiting for whoever inherited it to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] in "ZX"


def sleeper_workload(pids: Path, **options) -> Workload:
    """A fast contender, and one whose shell starts a child and waits on it for a minute (its pids under `pids`)."""
    sleep = (f"sleep 60 & echo $! > {pids}/child-{{nap}}; echo $$ > {pids}/shell-{{nap}}; "
             "if [ {nap} -gt 0 ]; then wait; fi; echo done")
    return Workload(
        name="sleepy",
        description="A contender that outlives its time limit, and one that does not.",
        size_unit="records",
        record_bytes=None,
        params={"nap": "1"},
        contenders=[
            Contender(name="fast", role="spillway", command=["sh", "-c", "echo fast"], expect_output="fast"),
            Contender(name="sleeper", role="peer", command=["sh", "-c", sleep], may_fail=True),
        ],
        comparisons=[Comparison(label="time", contender="fast", peer="sleeper", metric="wall_s")],
        **options,
    )


def test_a_run_past_its_time_limit_is_stopped_with_its_children(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    report = invoke(sleeper_workload(pids, run_timeout_s=0.5), tmp_path, 10, runs=2)
    saved = json.loads((tmp_path / "out" / "sleepy.json").read_text())
    assert saved["run_timeout_s"] == 0.5 and report["run_timeout_s"] == 0.5
    (part,) = saved["parts"]
    assert part["run_timeout_s"] == 0.5
    # Stopped in its first round, not waited for (its child sleeps for a minute), and not called an OOM kill.
    assert part["part_wall_s"] < 30
    (failure,) = part["failed"]
    assert failure["name"] == "sleeper" and failure["timed_out"] is True
    assert failure["reason"] == "sleeper stopped after 0.5 s without finishing (the run's time limit) in round 1"
    # Its shell and the child it started died with it.
    shell, child = (int((pids / f"{name}-1").read_text()) for name in ("shell", "child"))
    assert process_gone(shell) and process_gone(child)
    # The fast contender is measured in every round, as without a limit.
    (fast,) = part["contenders"]
    assert fast["name"] == "fast" and len(fast["runs"]) == 2
    assert all(measured["exit_code"] == 0 and "timed_out" not in measured for measured in fast["runs"])
    assert part["comparisons"] == []
    markdown = (tmp_path / "out" / "sleepy.md").read_text()
    assert "every run is stopped after 0.5 s without finishing (the run's time limit) and reported failed" in markdown
    assert ("sleeper failed, so it has no ratio: sleeper stopped after 0.5 s without finishing (the run's time "
            "limit) in round 1") in markdown
    assert "out of memory" not in markdown


def test_a_time_limit_of_a_variant_and_a_contender_that_may_not_fail(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    pids.mkdir()
    # The workload has no limit; one variant has one. Without a limit the sleeper's shell does not wait.
    workload = sleeper_workload(pids, variants=[
        Variant(name="free", params={"nap": "0"}),
        Variant(name="limited", params={"nap": "2"}, run_timeout_s=0.25),
    ])
    report = invoke(workload, tmp_path, 10)
    free, limited = report["parts"]
    assert report["run_timeout_s"] is None and free["run_timeout_s"] is None and limited["run_timeout_s"] == 0.25
    assert free["failed"] == [] and [c["name"] for c in free["contenders"]] == ["fast", "sleeper"]
    assert [f["reason"] for f in limited["failed"]] == [
        "sleeper stopped after 0.25 s without finishing (the run's time limit) in round 1"]
    markdown = (tmp_path / "out" / "sleepy.md").read_text()
    assert "every run stopped after 0.25 s without finishing (the run's time limit)" in markdown
    assert "each part's runs are stopped after the time limit its line names" in markdown
    # A contender that may not fail stops the benchmark, and its processes are gone all the same.
    workload.contenders[1].may_fail = False
    with pytest.raises(BenchmarkFailure, match=r"sleeper stopped after 0\.25 s without finishing \(the run's time "
                                               r"limit\) in round 1\ncommand: sh -c sleep 60"):
        invoke(workload, tmp_path, 10)
    assert process_gone(int((pids / "shell-2").read_text())) and process_gone(int((pids / "child-2").read_text()))
    assert not (tmp_path / "data").exists()


@pytest.mark.skipif(not memory_cgroups_usable(), reason="needs root and the cgroup v1 memory controller")
def test_a_stopped_run_leaves_nothing_in_its_cgroup(tmp_path: Path) -> None:
    """A process that left the run's process group (setsid) is still in its cgroup, and is killed there."""
    escaped = tmp_path / "escaped"
    workload = Workload(
        name="escape",
        description="A contender whose child starts a session of its own, then hangs.",
        size_unit="records",
        record_bytes=None,
        run_timeout_s=0.5,
        variants=[Variant(name="tight", memory_limit="64M")],
        contenders=[
            Contender(name="fast", role="spillway", command=["sh", "-c", "echo fast"]),
            Contender(name="escaper", role="peer", may_fail=True,
                      command=["sh", "-c", f"setsid sh -c 'echo $$ > {escaped}; exec sleep 60' & sleep 60"]),
        ],
        comparisons=[],
    )
    report = invoke(workload, tmp_path, 10)
    (part,) = report["parts"]
    (failure,) = part["failed"]
    assert "stopped after 0.5 s without finishing (the run's time limit)" in failure["reason"]
    assert process_gone(int(escaped.read_text()))
    assert [c["name"] for c in part["contenders"]] == ["fast"]
    assert not list(Path("/sys/fs/cgroup/memory").glob(f"spillway-bench-{os.getpid()}*"))
