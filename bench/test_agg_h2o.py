"""Self-test of bench/agg_h2o.py: its data follows the benchmark's definition, and Spillway's answers agree with
Polars' (and DuckDB's, where it is installed) on every question.

Run with `.venv/bin/python -m pytest bench/test_agg_h2o.py` (Spillway installed in the venv).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import agg_h2o


def test_the_data_follows_the_published_definition(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    agg_h2o.generate(tmp_path, 20_000, 10, seed=3)
    table = pq.read_table(tmp_path / "h2o.parquet").to_pydict()
    assert len(table["id1"]) == 20_000
    assert set(table["id1"]) == {f"id{index:03d}" for index in range(1, 11)}
    assert set(table["id3"]) <= {f"id{index:010d}" for index in range(1, 2_001)} and len(set(table["id3"])) > 1_900
    assert set(table["id4"]) == set(range(1, 11)) and max(table["id6"]) <= 2_000
    assert set(table["v1"]) == set(range(1, 6)) and set(table["v2"]) == set(range(1, 16))
    assert all(0 <= value < 100 and round(value, 6) == value for value in table["v3"])


def answers(engine, directory, capsys) -> dict:
    {"spillway": agg_h2o.spillway_answers, "polars": agg_h2o.polars_answers,
     "duckdb": agg_h2o.duckdb_answers}[engine](directory)
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["rows"] == 30_000 and result["geomean_s"] > 0
    return {question: (entry["groups"], entry["check"]) for question, entry in result["questions"].items()}


@pytest.mark.parametrize("peer", ["polars", "duckdb"])
def test_spillway_answers_every_question_as_its_peers_do(tmp_path, capsys, peer):
    pytest.importorskip(peer)
    pytest.importorskip("spillway")
    agg_h2o.generate(tmp_path, 30_000, 10, seed=4)
    ours = answers("spillway", tmp_path, capsys)
    theirs = answers(peer, tmp_path, capsys)
    assert list(ours) == agg_h2o.QUESTIONS
    assert ours == theirs
    assert ours["q1"][0] == 10 and ours["q2"][0] == 100 and ours["q10"][0] > 25_000
