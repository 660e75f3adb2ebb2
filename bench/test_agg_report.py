"""Self-test of bench/agg.py's report plumbing (no data, no timing).

Run with `python3 -m pytest bench/test_agg_report.py`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import agg


def report(commit: str, labels: list[str], rate: float) -> dict:
    def dataset(label: str) -> dict:
        figures = {"records_per_s": rate, "wall_s": 1.0, "cpu_s": 2.0, "peak_rss_bytes": 2**20}
        return {
            "label": label,
            "records": 100,
            "groups": 10,
            "key_bytes": 800,
            "contenders": {"spillway-cbt": {"summary": figures, "runs": []}},
            "targets": [],
        }

    return {
        "workload": "agg",
        "date": "2026-01-0" + commit[-1],
        "commit": commit,
        "machine": {"cpu_cores": 2, "cpu_model": "test", "memory_bytes": 2**30},
        "records": 100,
        "runs": 1,
        "command": f"python3 bench/agg.py (as of {commit})",
        "datasets": [dataset(label) for label in labels],
    }


def test_a_partial_report_replaces_its_datasets_and_keeps_where_each_came_from(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "agg.json").write_text(json.dumps(report("abc1", ["uniform", "words"], 1e6)))
    part = tmp_path / "part.json"
    part.write_text(json.dumps(report("def2", ["words", "zipf"], 3e6)))
    assert agg.merge(part, out) == 0
    merged = json.loads((out / "agg.json").read_text())
    assert [dataset["label"] for dataset in merged["datasets"]] == ["uniform", "words", "zipf"]
    assert [dataset["commit"] for dataset in merged["datasets"]] == ["abc1", "def2", "def2"]
    text = (out / "agg.md").read_text()
    assert "commit abc1" in text and text.count("Measured 2026-01-02, commit def2") == 2
    assert "| spillway-cbt | 3.00 M |" in text and "| spillway-cbt | 1.00 M |" in text


def test_a_part_with_another_record_count_is_refused(tmp_path):
    (tmp_path / "agg.json").write_text(json.dumps(report("abc1", ["uniform"], 1e6)))
    other = report("def2", ["words"], 1e6)
    other["records"] = 1000
    part = tmp_path / "part.json"
    part.write_text(json.dumps(other))
    assert agg.merge(part, tmp_path) == 1
    assert len(json.loads((tmp_path / "agg.json").read_text())["datasets"]) == 1
