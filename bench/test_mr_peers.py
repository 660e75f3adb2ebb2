"""Self-test of bench/mr_peers.py's inputs and output checks (no engine runs, no timing).

Run with `python3 -m pytest bench/test_mr_peers.py`; the digest tests need DuckDB and are
skipped where it is not installed (the benchmark installs it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mr_peers


def test_docs_numbers_the_lines(tmp_path):
    text = tmp_path / "text.txt"
    text.write_bytes(b"a b\nc\n\nd e f\n")
    mr_peers.docs(text, tmp_path / "docs.tsv")
    assert (tmp_path / "docs.tsv").read_bytes() == b"1\ta b\n2\tc\n3\t\n4\td e f\n"


def test_pagerank_digests_agree_to_rounding_only():
    expected = {"lines": 3, "rank_sum": 0.75, "top": [2, 1, 3]}
    assert mr_peers.agrees(expected, {"lines": 3, "rank_sum": 0.75 + 1e-12, "top": [2, 1, 3]})
    assert not mr_peers.agrees(expected, {"lines": 3, "rank_sum": 0.76, "top": [2, 1, 3]})
    assert not mr_peers.agrees(expected, {"lines": 3, "rank_sum": 0.75, "top": [1, 2, 3]})
    assert not mr_peers.agrees(expected, {"lines": 4, "rank_sum": 0.75, "top": [2, 1, 3]})
    assert mr_peers.agrees({"lines": 2, "checksum": "7"}, {"lines": 2, "checksum": "7"})
    assert not mr_peers.agrees({"lines": 2, "checksum": "7"}, {"lines": 2, "checksum": "8"})


def test_digests_ignore_order_and_read_uniq_output(tmp_path):
    pytest.importorskip("duckdb")
    spillway = tmp_path / "spillway"
    spillway.mkdir()
    (spillway / "part-00000.tsv").write_text("apple\t3\nbanana\t1\n")
    (spillway / "part-00001.tsv").write_text("cherry\t12\n")
    (spillway / "part-00002.partial").write_text("junk\t1\n")
    saved = tmp_path / "expected.json"
    assert mr_peers.main(["digest", "wordcount", str(spillway), "--save", str(saved)]) == 0
    assert json.loads(saved.read_text())["lines"] == 3

    shuffled = tmp_path / "peer.tsv"
    shuffled.write_text("cherry\t12\napple\t3\nbanana\t1\n")
    assert mr_peers.main(["digest", "wordcount", str(shuffled), "--expect", str(saved)]) == 0
    uniq = tmp_path / "uniq.txt"
    uniq.write_text("      3 apple\n      1 banana\n     12 cherry\n")
    assert mr_peers.main(["digest", "wordcount", str(uniq), "--format", "uniq", "--expect", str(saved)]) == 0
    wrong = tmp_path / "wrong.tsv"
    wrong.write_text("cherry\t11\napple\t3\nbanana\t1\n")
    assert mr_peers.main(["digest", "wordcount", str(wrong), "--expect", str(saved)]) == 1
