"""spillway.pmem.HashTable: the CCEH persistent hash table from Python."""

import random
import subprocess
import sys

import pytest

from spillway import CorruptionError, InvalidArgumentError
from spillway.pmem import HashTable

# Small segments: a few thousand inserts split segments and double the directory many times.
SMALL = dict(segment_bytes=512, probe=3, size="4M")


def test_a_table_behaves_as_a_mapping_and_survives_reopening(tmp_path):
    path = tmp_path / "t.pmem"
    model = {}
    rng = random.Random(5)
    for round_ in range(3):
        with HashTable(path, "clwb" if round_ == 0 else "fence", **SMALL) as table:
            for _ in range(3000):
                key = rng.randrange(1 << 64) if rng.random() < 0.5 else rng.randrange(2000)
                if rng.random() < 0.8:
                    table[key] = model[key] = rng.randrange(1 << 64)
                elif key in model:
                    assert table.pop(key) == model.pop(key)
                else:
                    assert table.pop(key, None) is None
            assert len(table) == len(model)
            assert dict(table.items()) == model
            assert sorted(table) == sorted(model)
    with HashTable(path) as table:
        table.verify()
        assert all(table[key] == value for key, value in model.items())
        assert (1 << 64) - 1 not in table and -1 not in table and "x" not in table
        assert table.get(12345678901234567, "absent") == "absent"
        with pytest.raises(KeyError):
            table[12345678901234567]
        with pytest.raises(KeyError):
            del table[12345678901234567]
        stats = table.stats()
        assert stats["persistence"] in ("clwb", "clflushopt", "clflush") and stats["global_depth"] > 3
        assert 0 <= stats["huge_page_bytes"] <= stats["region_bytes"]
        asked = list(model)[:500] + [rng.randrange(1 << 64) for _ in range(100)]
        assert table.get_many(asked) == [model.get(key) for key in asked]
        assert table.get_many(iter([])) == []
        with pytest.raises(InvalidArgumentError, match="key 1 must be a whole number"):
            table.get_many([1, -1])


def test_every_persistence_mode_writes_the_same_table(tmp_path):
    for mode in ("clflush", "auto", "fence", "none", "latency:200ns"):
        path = tmp_path / f"{mode.replace(':', '-')}.pmem"
        with HashTable(path, mode, **SMALL) as table:
            for key in range(500):
                table[key] = key * key
            flushes = table.stats()["flushes"]
            assert flushes >= 500, (mode, flushes)
        with HashTable(path, "none") as table:
            assert [table[key] for key in range(500)] == [key * key for key in range(500)]


def test_a_table_not_closed_is_recovered_whole_at_the_next_open(tmp_path):
    """A process that dies without closing the table (os._exit: no cleanup at all)."""
    path = tmp_path / "t.pmem"
    code = (
        "import os, sys\n"
        "from spillway.pmem import HashTable\n"
        f"t = HashTable({str(path)!r}, 'clwb', segment_bytes=512, probe=3, size='4M')\n"
        "for key in range(4000):\n"
        "    t[key] = key + 1\n"
        "del t[17]\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    with HashTable(path) as table:
        table.verify()
        assert len(table) == 3999 and 17 not in table
        assert all(table[key] == key + 1 for key in range(4000) if key != 17)


def test_bad_arguments_are_refused_with_the_parameter_named(tmp_path):
    path = tmp_path / "t.pmem"
    with pytest.raises(InvalidArgumentError, match="persistence"):
        HashTable(path, "fast")
    with pytest.raises(InvalidArgumentError, match="power of two"):
        HashTable(path, segment_bytes=1000)
    with pytest.raises(InvalidArgumentError, match="probe"):
        HashTable(path, segment_bytes=256, probe=9)
    with pytest.raises(InvalidArgumentError, match="size"):
        HashTable(path, size="lots")
    assert not path.exists()
    with HashTable(path, **SMALL) as table:
        for bad in (-1, 1 << 64, 1.5, "1", True, None):
            with pytest.raises(InvalidArgumentError, match="a key"):
                table[bad] = 1
        with pytest.raises(InvalidArgumentError, match="a value"):
            table[1] = -5
        with pytest.raises(InvalidArgumentError, match="open elsewhere"):
            HashTable(path)
    with pytest.raises(InvalidArgumentError, match="closed"):
        table[1] = 2
    table.close()  # idempotent


def test_damaged_and_foreign_files_are_reported(tmp_path):
    junk = tmp_path / "junk.pmem"
    junk.write_bytes(b"\x07" * 8192)
    with pytest.raises(CorruptionError, match="magic"):
        HashTable(junk)
    path = tmp_path / "t.pmem"
    with HashTable(path, **SMALL) as table:
        table[1] = 2
    data = bytearray(path.read_bytes())
    data[20] ^= 0xFF  # inside the header's checksummed kind
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptionError, match="checksum"):
        HashTable(path)


def test_a_table_of_byte_keys_behaves_as_a_mapping_and_keeps_its_kind(tmp_path):
    path = tmp_path / "bytes.pmem"
    model = {}
    rng = random.Random(5)
    with HashTable(path, "clwb", keys="bytes", segment_bytes=256, probe=3, size="4M") as table:
        assert table.keys_kind == "bytes"
        for i in range(600):
            key = f"user:{rng.randrange(200)}".encode()
            if rng.random() < 0.25:
                assert table.pop(key, None) == model.pop(key, None)
            else:
                value = bytes(rng.randrange(256) for _ in range(rng.randrange(100)))
                table[key] = value
                model[key] = value
        table[bytearray(b"raw")] = memoryview(b"\x00\xff")
        model[b"raw"] = b"\x00\xff"
        assert len(table) == len(model)
        assert dict(table.items()) == model
        table.verify()
        with pytest.raises(InvalidArgumentError, match="bytes, not int"):
            table[5] = b"x"
        with pytest.raises(InvalidArgumentError, match="4096"):
            table[b"k" * 5000] = b"x"
        with pytest.raises(InvalidArgumentError, match="u64 table"):
            table.get_many([b"raw"])
        assert 5 not in table and b"absent" not in table
        with pytest.raises(KeyError):
            del table[b"absent"]
    with HashTable(path) as table:
        assert table.keys_kind == "bytes"
        assert all(table[key] == value for key, value in model.items())
    with pytest.raises(InvalidArgumentError, match="bytes keys, not u64 keys"):
        HashTable(path, keys="u64")
    with pytest.raises(InvalidArgumentError, match="'u64' or 'bytes'"):
        HashTable(tmp_path / "other.pmem", keys="text")


def test_a_btree_is_a_sorted_mapping_that_survives_reopening(tmp_path):
    from spillway.pmem import BTree

    path = tmp_path / "tree.pmem"
    model = {}
    rng = random.Random(9)
    for round_ in range(3):
        with BTree(path, "clwb" if round_ == 0 else "fence", page_bytes=512, size="8M") as tree:
            for _ in range(3000):
                key = rng.randrange(1 << 64) if rng.random() < 0.3 else rng.randrange(3000)
                if rng.random() < 0.75:
                    tree[key] = model[key] = rng.randrange(1 << 64)
                elif key in model:
                    assert tree.pop(key) == model.pop(key)
                else:
                    assert tree.pop(key, None) is None
            assert len(tree) == len(model)
            assert list(tree.items()) == sorted(model.items())
            assert list(tree) == sorted(model)
    with BTree(path) as tree:
        tree.verify()
        keys = sorted(model)
        assert list(tree.range(100, 2000)) == [(key, model[key]) for key in keys if 100 <= key < 2000]
        assert list(tree.range(low=2500, batch=7)) == [(key, model[key]) for key in keys if key >= 2500]
        assert list(tree.range(high=10, batch=1)) == [(key, model[key]) for key in keys if key < 10]
        assert list(tree.range(100, 2000, reverse=True, batch=9)) == [
            (key, model[key]) for key in reversed(keys) if 100 <= key < 2000]
        assert list(reversed(tree)) == keys[::-1]
        tree[(1 << 64) - 1] = 5
        assert list(tree.range(low=(1 << 64) - 1)) == [((1 << 64) - 1, 5)]
        assert -1 not in tree and "x" not in tree
        with pytest.raises(KeyError):
            tree[(1 << 64) - 2]
        with pytest.raises(InvalidArgumentError, match="a key"):
            tree[-1] = 3
        with pytest.raises(InvalidArgumentError, match="batch"):
            list(tree.range(batch=0))
        stats = tree.stats()
        assert stats["height"] >= 3 and stats["page_bytes"] == 512 and stats["flushes"] > 0
    with BTree(tmp_path / "splits.pmem", page_bytes=512) as tree:
        for key in range(2000):
            tree[key * 7919 % 2000] = key
        stats = tree.stats()
        assert stats["splits"] > 2000 // 14 and 0 <= stats["rebuilds"] <= stats["splits"]
        # Draining it merges its sparse pages, down to one page.
        for key in range(1990):
            del tree[key * 7919 % 2000]
        assert list(tree) == sorted(key * 7919 % 2000 for key in range(1990, 2000))
        stats = tree.stats()
        assert stats["merges"] > 2000 // 14 and 0 < stats["merge_flushes"] < stats["flushes"]
        assert stats["height"] <= 2
    assert tree.closed
    with pytest.raises(InvalidArgumentError):
        BTree(tmp_path / "bad.pmem", page_bytes=1000)
    with pytest.raises(InvalidArgumentError, match="persistence"):
        BTree(tmp_path / "bad.pmem", persistence="sometimes")


def test_a_btree_left_unclosed_is_recovered_and_a_damaged_one_is_named(tmp_path):
    from spillway.pmem import BTree

    path = tmp_path / "tree.pmem"
    script = (
        "import os\n"
        "from spillway.pmem import BTree\n"
        f"tree = BTree({str(path)!r}, page_bytes=512, size='4M')\n"
        "for key in range(2000): tree[key] = key * 2\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True)
    with BTree(path) as tree:
        tree.verify()
        assert list(tree.items()) == [(key, key * 2) for key in range(2000)]
    data = bytearray(path.read_bytes())
    data[0] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptionError):
        BTree(path)


def test_a_btree_of_byte_keys_is_a_sorted_mapping_that_keeps_its_kind(tmp_path):
    from spillway.pmem import BTree

    path = tmp_path / "bytes-tree.pmem"
    model = {}
    rng = random.Random(11)
    with BTree(path, "clwb", keys="bytes", page_bytes=512, size="8M") as tree:
        assert tree.keys_kind == "bytes"
        for i in range(3000):
            # Keys sharing their first eight bytes and more: their order is the records'.
            key = f"customer:{rng.randrange(900):04}".encode() if i % 2 else bytes([rng.randrange(4)] * rng.randrange(12))
            if rng.random() < 0.3:
                assert tree.pop(key, None) == model.pop(key, None)
            else:
                value = bytes(rng.randrange(256) for _ in range(rng.randrange(60)))
                tree[key] = value
                model[key] = value
        tree[bytearray(b"raw")] = memoryview(b"\x00\xff")
        model[b"raw"] = b"\x00\xff"
        assert len(tree) == len(model)
        assert list(tree.items()) == sorted(model.items())
        assert list(reversed(tree)) == sorted(model, reverse=True)
        low, high = b"customer:0100", b"customer:0500"
        want = [(k, v) for k, v in sorted(model.items()) if low <= k < high]
        assert list(tree.range(low, high, batch=7)) == want
        assert list(tree.range(low, high, reverse=True, batch=5)) == want[::-1]
        stats = tree.stats()
        assert stats["splits"] > 10 and stats["height"] >= 2
        tree.verify()
        with pytest.raises(InvalidArgumentError, match="bytes, not int"):
            tree[5] = b"x"
        with pytest.raises(InvalidArgumentError, match="4096"):
            tree[b"k" * 5000] = b"x"
        assert 5 not in tree and b"absent" not in tree
        with pytest.raises(KeyError):
            del tree[b"absent"]
    with BTree(path) as tree:
        assert tree.keys_kind == "bytes"
        assert list(tree.items()) == sorted(model.items())
    with pytest.raises(InvalidArgumentError, match="bytes keys, not u64 keys"):
        BTree(path, keys="u64")
    with pytest.raises(InvalidArgumentError, match="'u64' or 'bytes'"):
        BTree(tmp_path / "other.pmem", keys="text")
