"""spillway.KV: the WB Tree key-value store from Python."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import spillway
from spillway import CorruptionError, InvalidArgumentError, KV

# Tiny sizes so that a few thousand writes spill, split and grow the tree.
SMALL = dict(root_bytes="64K", node_bytes="128K", fan_out=4, block_bytes=512, sync=False, key_bytes_max=1024, value_bytes_max=4096)


def test_a_store_behaves_as_a_mapping_and_survives_reopening(tmp_path):
    path = tmp_path / "db"
    model = {}
    with KV(path, **SMALL) as db:
        for i in range(6000):
            key, value = f"key-{i % 2500}".encode(), f"value-{i}".encode() * (1 + i % 5)
            db[key] = value
            model[key] = value
            if i % 7 == 0:
                del db[f"key-{i % 1000}".encode()]
                model.pop(f"key-{i % 1000}".encode(), None)
        db["text"] = "stored as utf-8"
        model[b"text"] = b"stored as utf-8"
        assert db[b"text"] == b"stored as utf-8"
        assert db.get(b"absent") is None and db.get(b"absent", 5) == 5
        with pytest.raises(KeyError):
            db[b"absent"]
        assert b"key-1" in db and b"absent" not in db
        assert dict(db.items()) == model
        assert sorted(db.keys()) == sorted(model)
        db.settle()
        stats = db.stats()
        assert stats["root_spills"] > 3 and stats["leaves"] > 1 and stats["fast_splits"] > 0
        assert stats["index_memory_bytes"] > 0 and stats["list_records"] > 0
        report = db.verify()
        assert report["leaves"] == stats["leaves"] and report["unreferenced_files"] == []
    assert db.closed
    with pytest.raises(InvalidArgumentError, match="closed"):
        db.get(b"key-1")
    with KV(path, **SMALL) as db:
        assert dict(db.items()) == model
        assert repr(db).endswith("[open]")


def test_batches_are_all_or_nothing(tmp_path):
    with KV(tmp_path / "db", **SMALL) as db:
        db[b"a"] = b"0"
        with db.batch() as batch:
            batch.put(b"a", b"1").put(b"b", b"2").delete(b"c")
        assert (db[b"a"], db[b"b"]) == (b"1", b"2")
        # A block that fails writes nothing.
        with pytest.raises(RuntimeError):
            with db.batch() as batch:
                batch.put(b"a", b"lost")
                raise RuntimeError("changed my mind")
        assert db[b"a"] == b"1"
        # A bad write refuses the whole batch.
        batch = spillway.kv.Batch().put(b"x", b"1").put(b"y", b"z" * 5000)
        with pytest.raises(InvalidArgumentError, match="value"):
            db.write(batch)
        assert db.get(b"x") is None


def test_merge_mode_aggregates_while_ingest_goes_on(tmp_path):
    path = tmp_path / "counts"
    words = [f"w{i % 300}" for i in range(20000)] + [f"rare{i}" for i in range(3000)]
    expected = {}
    with KV(path, merge="sum+count", **SMALL) as db:
        for n, word in enumerate(words):
            db.merge(word, n % 10)
            total, count = expected.get(word.encode(), (0, 0))
            expected[word.encode()] = (total + n % 10, count + 1)
            if n == 10000:
                assert db[b"w7"] == list(expected[b"w7"])  # queryable mid-ingest
        db["reset"] = 5  # a put sets the aggregate to that of one value
        expected[b"reset"] = (5, 1)
        assert {key: tuple(value) for key, value in db.items()} == expected
        assert db.stats()["merges"] == len(words)
    # A reader opens it with the function it was written with.
    with KV(path, read_only=True) as reader:
        assert reader[b"w0"] == list(expected[b"w0"])
        with pytest.raises(InvalidArgumentError, match="read-only"):
            reader.merge("w0", 1)
    with pytest.raises(InvalidArgumentError, match="merge operator"):
        KV(path, **SMALL)
    with pytest.raises(InvalidArgumentError, match="merge function"):
        with KV(tmp_path / "plain", **SMALL) as db:
            db.merge("x", 1)


def test_bad_options_and_values_get_clear_errors(tmp_path):
    with pytest.raises(TypeError, match="no option 'buffer'"):
        KV(tmp_path / "a", buffer=5)
    with pytest.raises(InvalidArgumentError, match="fan_out"):
        KV(tmp_path / "b", fan_out=1)
    with pytest.raises(InvalidArgumentError, match="lists_max"):
        KV(tmp_path / "b2", lists_max=1)
    with pytest.raises(InvalidArgumentError, match="false_positives_max"):
        KV(tmp_path / "b3", false_positives_max=-1)
    with pytest.raises(InvalidArgumentError, match="index_bits_per_key"):
        KV(tmp_path / "b4", index_bits_per_key=65)
    with pytest.raises(InvalidArgumentError, match="sync"):
        KV(tmp_path / "c", sync="sometimes")
    with pytest.raises(InvalidArgumentError, match="merge"):
        KV(tmp_path / "d", merge="first")
    with pytest.raises(InvalidArgumentError, match="holds no key-value store"):
        KV(tmp_path / "missing", read_only=True)
    with KV(tmp_path / "e", **SMALL) as db:
        with pytest.raises(InvalidArgumentError, match="key must be bytes"):
            db[5] = b"x"
        with pytest.raises(InvalidArgumentError, match="merge function"):
            db[b"k"] = 5
        with pytest.raises(InvalidArgumentError, match="key"):
            db[b"k" * 2000] = b"x"
    # A second writer of the same directory is refused.
    first = KV(tmp_path / "f", **SMALL)
    with pytest.raises(InvalidArgumentError, match="open in another process"):
        KV(tmp_path / "f", **SMALL)
    first.close()


def test_a_damaged_list_file_is_reported_with_its_name(tmp_path):
    path = tmp_path / "db"
    with KV(path, bloom_bits_per_key=0, **SMALL) as db:
        for i in range(3000):
            db[f"key-{i}"] = b"v" * 30
        db.settle()
    victim = sorted(name for name in os.listdir(path) if name.endswith(".list"))[0]
    with open(path / victim, "r+b") as file:
        file.seek(40)
        byte = file.read(1)
        file.seek(40)
        file.write(bytes([byte[0] ^ 0x40]))
    with KV(path, **SMALL) as db:
        with pytest.raises(CorruptionError, match=victim):
            db.verify()
        with pytest.raises(CorruptionError, match=victim):
            dict(db.items())


def test_threads_write_and_read_at_once_without_the_gil(tmp_path):
    with KV(tmp_path / "db", **SMALL) as db:
        def writer(offset):
            for i in range(3000):
                db[f"{offset}-{i}"] = str(i)
                assert db[f"{offset}-{i // 2}"] == str(i // 2).encode()

        threads = [threading.Thread(target=writer, args=(offset,)) for offset in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(list(db.keys())) == 9000


def test_the_command_line_loads_reads_and_checks_a_store(tmp_path):
    path = tmp_path / "db"
    spillway_cli = [sys.executable, "-m", "spillway"]
    load = subprocess.run(
        spillway_cli + ["kv", "load", "--dir", str(path), "--generate", "100000", "--key-bytes", "8", "--value-bytes", "8",
                        "--root-mib", "1", "--node-mib", "2", "--fan-out", "4", "--sync", "none", "--json"],
        capture_output=True, text=True, check=True,
    )
    report = json.loads(load.stdout)
    assert report["operations"] == 100000 and report["stats"]["root_spills"] >= 1
    stats = json.loads(subprocess.run(spillway_cli + ["kv", "stats", "--dir", str(path), "--json"],
                                      capture_output=True, text=True, check=True).stdout)
    assert stats["list_records"] + stats["root_records"] >= 100000 * 0.6
    verify = json.loads(subprocess.run(spillway_cli + ["kv", "verify", "--dir", str(path), "--json"],
                                       capture_output=True, text=True, check=True).stdout)
    assert verify["files"] >= 1
    scan = subprocess.run(spillway_cli + ["kv", "scan", "--dir", str(path), "--hex"], capture_output=True, text=True, check=True)
    pairs = [line.split("\t") for line in scan.stdout.splitlines()]
    assert len(pairs) == len({key for key, _ in pairs}) > 50000
    key, value = pairs[0]
    got = subprocess.run(spillway_cli + ["kv", "get", "--dir", str(path), "--hex", key, "00"], capture_output=True, text=True)
    assert got.returncode == 1 and got.stdout == f"{key}\t{value}\n" and "00: not found" in got.stderr


def test_a_path_that_names_no_directory_is_refused_and_nothing_is_created(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for bad in (None, 5, b"", ""):
        with pytest.raises(InvalidArgumentError, match="path"):
            KV(bad)
    with pytest.raises(InvalidArgumentError, match="path"):
        KV.repair(None)
    assert os.listdir(tmp_path) == [], "a refused path created something"


def test_a_failed_open_leaves_nothing_it_created(tmp_path):
    path = tmp_path / "db"
    with pytest.raises(InvalidArgumentError, match="root_bytes"):
        KV(path, root_bytes="1K")
    assert not path.exists(), "a failed open left a directory (holding LOCK)"
    with KV(path, **SMALL) as db:
        db[b"k"] = b"v"
    before = sorted(os.listdir(path))
    with pytest.raises(InvalidArgumentError, match="merge operator"):
        KV(path, merge="sum", **SMALL)
    assert sorted(os.listdir(path)) == before


def test_repair_rebuilds_a_damaged_store_and_reports_what_was_lost(tmp_path):
    path = tmp_path / "db"
    model = {}
    with KV(path, **SMALL) as db:
        for i in range(8000):
            key, value = f"key-{i}".encode(), f"value-{i}".encode()
            db[key] = value
            model[key] = value
        db.settle()
    assert KV.repair(path)["repaired"] is False, "a sound store is left as it is"
    os.remove(path / "CURRENT")
    with pytest.raises(CorruptionError, match="CURRENT"):
        KV(path, **SMALL)
    report = KV.repair(path)
    assert report["repaired"] and report["records_lost"] == 0 and "CURRENT" in report["problem"]
    with KV(path, **SMALL) as db:
        assert dict(db.items()) == model
        db.verify()
    # A list file cut to half: its records are named as lost, the rest stay.
    victim = max((name for name in os.listdir(path) if name.endswith(".list")), key=lambda name: os.path.getsize(path / name))
    with open(path / victim, "r+b") as file:
        file.truncate(os.path.getsize(path / victim) // 2)
    with pytest.raises(CorruptionError, match=victim):
        KV(path, **SMALL)
    with KV(path, read_only=True) as reader:  # a read-only open still serves the rest
        served = failed = 0
        for key, value in model.items():
            try:
                assert reader.get(key) == value
                served += 1
            except CorruptionError as error:
                assert victim in str(error)
                failed += 1
        assert served > 0 and failed > 0
    report = KV.repair(path)
    lost = [loss for loss in report["lost"] if loss["file"] == victim]
    assert lost and lost[0]["records"] > 0, report
    assert os.path.exists(path / "lost" / victim)
    with KV(path, **SMALL) as db:
        kept = dict(db.items())
    assert 0 < len(model) - len(kept) <= lost[0]["records"] * 2
    assert all(model[key] == value for key, value in kept.items())
    assert KV.repair(path)["repaired"] is False


def test_long_calls_stop_on_ctrl_c(tmp_path):
    path = tmp_path / "big"
    subprocess.run(
        [sys.executable, "-m", "spillway", "kv", "load", "--dir", str(path), "--generate", "4M", "--key-bytes", "8",
         "--value-bytes", "8", "--sync", "none"],
        check=True, capture_output=True,
    )
    with KV(path, read_only=True) as db:
        timer = threading.Timer(0.1, os.kill, (os.getpid(), signal.SIGINT))
        started = time.monotonic()
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                db.verify()  # reads 4 M records
            interrupted = time.monotonic() - started
        finally:
            timer.cancel()
        # The store is still there for the next call, which runs to its end.
        started = time.monotonic()
        assert db.verify()["records"] > 0
        whole = time.monotonic() - started
    # Stopped at the interrupt, not at its end (the same call, its files
    # cached the second time): a bound relative to the call itself.
    assert interrupted < whole / 2, (interrupted, whole)
