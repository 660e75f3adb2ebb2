"""Self-test of the benchmark harness on a toy workload (no spillway binary needed).

Run with `python3 -m pytest bench/test_run.py`. It checks the harness's plumbing
and report files, never a timing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import run
from workloads import Comparison, Contender, DiskBound, Step, Variant, Workload

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
    report = run.run_workload(
        TOY,
        size_bytes=2**20,
        runs=2,
        base_dir=tmp_path / "data",
        out_dir=out_dir,
        drop_cache=False,
    )

    saved = json.loads((out_dir / "toy.json").read_text())
    assert saved["workload"] == "toy"
    assert saved["records"] == 2**20 // 100
    assert saved["data_bytes"] == (2**20 // 100) * 100
    assert saved["cache"] == "warm"
    assert saved["machine"]["cpu_cores"] >= 1
    assert saved["spillway"] is None
    contenders = {entry["name"]: entry for entry in saved["contenders"]}
    assert list(contenders) == ["head write", "dd write", "cat read"]
    for entry in contenders.values():
        assert [r["round"] for r in entry["runs"]] == [0, 1]
        for measured in entry["runs"]:
            assert measured["exit_code"] == 0
            assert measured["wall_s"] > 0
            assert measured["peak_rss_kib"] > 0
            assert measured["throughput_mb_s"] > 0
        summary = entry["summary"]
        assert summary["wall_s"]["min"] <= summary["wall_s"]["median"] <= summary["wall_s"]["max"]
    # /proc/<pid>/io of the child (a shell counts the children it reaped) saw the bytes.
    assert contenders["dd write"]["runs"][0]["wchar"] >= saved["data_bytes"]
    assert contenders["head write"]["runs"][0]["wchar"] >= saved["data_bytes"]
    assert contenders["cat read"]["runs"][0]["rchar"] >= saved["data_bytes"]

    (comparison,) = saved["comparisons"]
    head_median = contenders["head write"]["summary"]["throughput_mb_s"]["median"]
    dd_median = contenders["dd write"]["summary"]["throughput_mb_s"]["median"]
    assert comparison["ratio"] == pytest.approx(head_median / dd_median)
    assert len(comparison["per_round_ratios"]) == 2
    assert report["comparisons"][0]["ratio"] == comparison["ratio"]

    markdown = (out_dir / "toy.md").read_text()
    assert "| head write |" in markdown and "head write / dd write" in markdown
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
    with pytest.raises(run.BenchmarkFailure, match=r"exit code 3[\s\S]*oops"):
        run.run_workload(broken, 1000, 1, tmp_path / "data", tmp_path / "out", drop_cache=False)
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
    run.run_workload(flaky, 1000, 2, tmp_path / "data", tmp_path / "out", drop_cache=False)
    saved = json.loads((tmp_path / "out" / "flaky.json").read_text())
    assert [entry["name"] for entry in saved["contenders"]] == ["ours", "steady"]
    assert [c["peer"] for c in saved["comparisons"]] == ["steady"]
    (failure,) = saved["failed"]
    assert failure["name"] == "greedy"
    assert "Out of Memory Error" in failure["reason"]
    assert failure["comparisons"][0]["target"] == 5.0
    markdown = (tmp_path / "out" / "flaky.md").read_text()
    assert "greedy failed: " in markdown and "(no ratio: the peer failed)" in markdown
    # A contender that may not fail still stops the benchmark.
    strict = Workload(
        name="strict",
        description="The same failure, not allowed.",
        contenders=[Contender(name="greedy", role="peer", command=["sh", "-c", "exit 1"])],
        comparisons=[],
    )
    with pytest.raises(run.BenchmarkFailure):
        run.run_workload(strict, 1000, 1, tmp_path / "data", tmp_path / "out", drop_cache=False)


def test_wrong_output_size_fails(tmp_path: Path) -> None:
    short = Workload(
        name="short",
        description="A writer that writes too little.",
        contenders=[Contender(name="short", role="peer", command=["sh", "-c", "echo x > {dir}/a"], writes="{dir}/a")],
        comparisons=[],
    )
    with pytest.raises(run.BenchmarkFailure, match="expected 1000"):
        run.run_workload(short, 1000, 1, tmp_path / "data", tmp_path / "out", drop_cache=False)


def test_parse_size() -> None:
    assert run.parse_size("4G") == 4 * 2**30
    assert run.parse_size("100M") == 100 * 2**20
    assert run.parse_size("1k") == 1024
    assert run.parse_size("12345") == 12345
    assert run.format_size_arg(4 * 2**30) == "4G"


def test_list_command() -> None:
    listing = subprocess.run(
        [sys.executable, str(Path(run.__file__)), "--list"], capture_output=True, text=True, check=True
    ).stdout
    assert "gensort" in listing


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

    report = run.run_workload(
        workload("echo 'Records: 10' >&2; exit 1"), 1000, 1, tmp_path / "data", tmp_path / "out", drop_cache=False
    )
    assert report["contenders"][0]["runs"][0]["exit_code"] == 1
    with pytest.raises(run.BenchmarkFailure, match="without printing"):
        run.run_workload(
            workload("echo 'Records: 9'; exit 1"), 1000, 1, tmp_path / "data", tmp_path / "out", drop_cache=False
        )
    with pytest.raises(run.BenchmarkFailure, match="exit code 2"):
        run.run_workload(
            workload("echo 'Records: 10'; exit 2"), 1000, 1, tmp_path / "data", tmp_path / "out", drop_cache=False
        )


def test_refuses_data_inside_the_repository(tmp_path: Path) -> None:
    inside = run.REPO_ROOT / "bench" / "not-here"
    if not (run.REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    with pytest.raises(run.BenchmarkFailure, match="inside the repository"):
        run.run_workload(TOY, 1000, 1, inside, tmp_path / "out", drop_cache=False)
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
    report = run.run_workload(
        parts_workload(), size_bytes=[1000, 2000], runs=[2, 1], base_dir=tmp_path / "data", out_dir=out_dir,
        drop_cache=False,
    )
    saved = json.loads((out_dir / "parts.json").read_text())
    assert [part["label"] for part in saved["parts"]] == [
        "1000 B, zeros", "1000 B, ones", "1.95 KiB, zeros", "1.95 KiB, ones",
    ]
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
    assert "## 1000 B, zeros" in markdown and "Summary" in markdown and "of disk-bound limit" in markdown
    assert "Overlapped limit" in markdown
    assert "so no 2-IO sort reaches it on this disk" in markdown
    assert (out_dir / "parts.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    index = (out_dir / "README.md").read_text()
    assert "1.95 KiB, ones" in index
    assert not (tmp_path / "data").exists()


def test_output_that_does_not_validate_fails_loudly(tmp_path: Path) -> None:
    with pytest.raises(run.BenchmarkFailure, match="OUTPUT DID NOT VALIDATE: cp copy"):
        run.run_workload(
            parts_workload("exit 1"), 1000, 1, tmp_path / "data", tmp_path / "out", drop_cache=False
        )
    assert not (tmp_path / "out" / "parts.json").exists()
    assert not (tmp_path / "data").exists()
