"""Every shell and Python example in the README and in docs/*.md runs.

Each document's examples run in order in a scratch directory of their own
(a block may use the files an earlier block of the same document made),
shell blocks with ``bash -e`` and Python blocks with this interpreter, at a
small scale: the runner rewrites large numbers and data sizes before it runs
a block (see ``scaled``). A block fails the test when it exits non-zero.

A block the runner cannot run (a synopsis, a command that stands for the
reader's own program, the install itself) is marked in the document with an
HTML comment on the line before it, ``<!-- not run: the reason -->``, and
the reason must be given.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import List, NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = {"sh": "sh", "bash": "sh", "shell": "sh", "python": "python"}
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.*?)\s*-->\s*$")


class Example(NamedTuple):
    document: Path
    line: int
    language: str
    code: str
    skip: str  # why it is not run, or ""


def examples(document: Path) -> List[Example]:
    text = document.read_text()
    found = []
    for match in BLOCK.finditer(text):
        language = LANGUAGES.get(match.group(1))
        if language is None:
            continue
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = NOT_RUN.search(before)
        line = text.count("\n", 0, match.start()) + 1
        found.append(Example(document, line, language, match.group(2), marker.group(1) if marker else ""))
    return found


# Options whose sizes are budgets, not amounts of data: left as written.
BUDGETS = re.compile(r"(memory|buffer|cache)", re.I)


def scaled(code: str) -> str:
    """The example at a small scale: integers of 100,000 and more divided
    by 1,000 (``10_000_000`` -> ``10_000``, ``-b5000`` stays), sizes with a
    unit one unit down (``1G`` -> ``1M``, ``10M`` -> ``10K``) unless they are
    a budget (after an option or parameter whose name says memory, buffer or
    cache), an R-MAT scale above 16 ten less (2**22 vertices -> 2**12), and
    ``/scratch`` a directory of the scratch directory."""

    def integer(match: re.Match) -> str:
        digits = match.group(0)
        value = int(digits.replace("_", ""))
        if value < 100_000:
            return digits
        return f"{value // 1000:_}" if "_" in digits else str(value // 1000)

    def size(match: re.Match) -> str:
        if BUDGETS.search(match.group(1)):
            return match.group(0)
        number, unit = match.group(2), match.group(3)
        smaller = {"T": "G", "G": "M", "M": "K", "K": ""}[unit]
        if unit == "K":
            number = str(max(1, int(number)) * 1024 // 1000)
        return f"{match.group(1)}{number}{smaller}"

    # A size is a number with a unit, as an argument or a quoted string;
    # group 1 is what comes before it on its line up to the number (the
    # option or parameter it belongs to).
    code = re.sub(r"([^\n]*?[\s=\"'])(\d+)([KMGT])(?=[\s\"',)]|$)", size, code, flags=re.M)
    code = re.sub(r"(?<![\w.<])\d[\d_]{5,}(?![\w.])", integer, code)
    code = re.sub(
        r"(--scale[ =]|scale=)(\d+)",
        lambda match: match.group(1) + str(int(match.group(2)) - 10 if int(match.group(2)) > 16 else match.group(2)),
        code,
    )
    return code.replace("/scratch", "scratch")


ALL = [example for document in DOCUMENTS for example in examples(document)]


def test_every_document_has_examples_and_every_skip_says_why():
    assert len(ALL) >= 10
    for example in ALL:
        if example.skip == "" and NOT_RUN.search(example.code):
            pytest.fail(f"{example.document.name}:{example.line}: a not-run marker inside a block")
    skipped = [example for example in ALL if example.skip]
    assert all(len(example.skip) > 10 for example in skipped), skipped


def test_scaling_keeps_budgets_and_cuts_data():
    assert scaled("spillway gensort -c 10000000 input.dat") == "spillway gensort -c 10000 input.dat"
    assert scaled("gensort -a -s -b5000 1000 part2.dat") == "gensort -a -s -b5000 1000 part2.dat"
    assert scaled("sort a b --memory 4G --tmp /scratch") == "sort a b --memory 4G --tmp scratch"
    assert scaled("gen text --bytes 1G -o words.txt") == "gen text --bytes 1M -o words.txt"
    assert scaled('workload.text("w.txt", bytes="1G", vocabulary=100_000)') == (
        'workload.text("w.txt", bytes="1M", vocabulary=100)'
    )
    assert scaled('Aggregator("sum", memory="512M")') == 'Aggregator("sum", memory="512M")'
    assert scaled("kv load --generate 10M --key-bytes 8") == "kv load --generate 10K --key-bytes 8"
    assert scaled("gen rmat --scale 22 --edge-factor 16") == "gen rmat --scale 12 --edge-factor 16"
    assert scaled("workload.rmat('e.tsv', scale=16)") == "workload.rmat('e.tsv', scale=16)"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_the_examples_of_a_document_run(document, tmp_path):
    environment = dict(os.environ)
    # The installed command and package, as a reader has them after the install.
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environment.get('PATH', '')}"
    (tmp_path / "scratch").mkdir()
    ran = 0
    for example in examples(document):
        if example.skip:
            continue
        code = scaled(example.code)
        if example.language == "sh":
            command = ["bash", "-e", "-o", "pipefail", "-c", code]
        else:
            command = [sys.executable, "-c", code]
        result = subprocess.run(
            command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, (
            f"{document.name}:{example.line}: the {example.language} example failed "
            f"(exit {result.returncode}) as run:\n{code}\n--- stdout\n{result.stdout[-2000:]}"
            f"\n--- stderr\n{result.stderr[-4000:]}"
        )
        ran += 1
    if not examples(document):
        pytest.skip(f"{document.name} has no shell or Python examples")
