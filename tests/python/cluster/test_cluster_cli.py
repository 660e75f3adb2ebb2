"""``spillway cluster ...`` against a fresh local cluster."""

import json
import subprocess
import sys


def spillway(*arguments, cwd, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "spillway", "cluster", *arguments], cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def test_the_commands_store_run_and_fetch_through_a_local_cluster(tmp_path):
    (tmp_path / "words.txt").write_text("b a\nc a\n" * 2000)
    me = f"{sys.executable} -m spillway cluster"
    script = " && ".join(
        [
            f"{me} put words.txt words.txt --block-size 4K",
            f"{me} ls > ls.txt",
            f"{me} stat words.txt --json > stat.json",
            f"{me} get words.txt back.txt",
            f"{me} mr wordcount words.txt --output counts --json > mr.json",
            f"{me} rm words.txt",
            f"{me} ls > after.txt",
        ]
    )
    run = spillway("local", "--nodes", "2", "--", "sh", "-c", script, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "ls.txt").read_text().split() == ["words.txt"]
    stat = json.loads((tmp_path / "stat.json").read_text())
    assert stat["size"] == 16_000 and stat["replication"] == 2 and len(stat["blocks"]) >= 4
    assert (tmp_path / "back.txt").read_bytes() == (tmp_path / "words.txt").read_bytes()
    job = json.loads((tmp_path / "mr.json").read_text())
    assert job["input_records"] == 4000 and job["output_records"] == 3
    parts = [f"counts/part-{index:05}.tsv" for index in range(job["partitions"])]
    assert (tmp_path / "after.txt").read_text().split() == parts


def test_commands_without_a_cluster_say_how_to_get_one(tmp_path):
    run = spillway("ls", cwd=tmp_path)
    assert run.returncode == 1
    assert "ls needs --address and --dir" in run.stderr
    run = spillway("local", "--nodes", "2", cwd=tmp_path)
    assert run.returncode == 1 and "give the command to run after --" in run.stderr
