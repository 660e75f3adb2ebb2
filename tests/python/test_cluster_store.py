"""One node's block store: durable blocks and file records, damage detected
and named (no Ray needed)."""

import pytest

from spillway.cluster.store import BlockStore, key_name
from spillway.errors import CorruptionError, InvalidArgumentError

KEY = 0x0123_4567_89AB_CDEF


def test_blocks_and_file_records_survive_a_reopen(tmp_path):
    store = BlockStore(tmp_path / "node")
    assert store.put_block(KEY, b"line one\nline two\n") == 18
    store.put_block(7, memoryview(b"x" * 1000))
    store.put_file(9, {"name": "words.txt", "blocks": [[KEY, 18]]})
    reopened = BlockStore(tmp_path / "node")
    assert reopened.block_keys() == [7, KEY]
    assert reopened.get_block(KEY) == b"line one\nline two\n"
    assert reopened.block_path(KEY).read_bytes() == b"line one\nline two\n", "the block file is the records alone"
    assert reopened.bytes_held() == 1018
    assert reopened.get_file(9) == {"name": "words.txt", "blocks": [[KEY, 18]]}
    assert reopened.get_file(10) is None
    assert reopened.file_keys() == [9]
    assert reopened.delete_block(7) and not reopened.delete_block(7)
    assert reopened.delete_file(9) and reopened.get_file(9) is None
    assert reopened.block_keys() == [KEY]


@pytest.mark.parametrize(
    "damage,message",
    [
        (lambda path: path.write_bytes(b"line one\nline twX\n"), "fails its CRC-32"),
        (lambda path: path.write_bytes(b"line one\n"), "9 bytes, but its sum records 18"),
        (lambda path: path.unlink(), "the block is missing but its sum is present"),
        (lambda path: path.with_name(path.name + ".sum").write_text("garbage\n"), "not a block sum"),
    ],
)
def test_a_damaged_block_is_corruption_naming_its_file(tmp_path, damage, message):
    store = BlockStore(tmp_path)
    store.put_block(KEY, b"line one\nline two\n")
    damage(store.block_path(KEY))
    with pytest.raises(CorruptionError, match=message) as raised:
        store.get_block(KEY)
    assert key_name(KEY) in str(raised.value)
    # Writing it again (a repair from a replica) makes it whole.
    store.put_block(KEY, b"line one\nline two\n")
    assert store.get_block(KEY) == b"line one\nline two\n"


def test_a_damaged_file_record_is_corruption(tmp_path):
    store = BlockStore(tmp_path)
    store.put_file(9, {"name": "a"})
    path = tmp_path / "files" / f"{key_name(9)}.json"
    path.write_text(path.read_text().replace('"a"', '"b"'))
    with pytest.raises(CorruptionError, match="fails its CRC-32"):
        store.get_file(9)
    path.write_text("{}")
    with pytest.raises(CorruptionError, match="not a file record"):
        store.get_file(9)


def test_what_a_crash_left_half_written_is_removed_on_open(tmp_path):
    store = BlockStore(tmp_path)
    store.put_block(1, b"whole")
    # A block written but not yet summed, and temporary files.
    (tmp_path / "blocks" / key_name(2)).write_bytes(b"half")
    (tmp_path / "blocks" / f"{key_name(3)}.partial").write_bytes(b"tmp")
    (tmp_path / "files" / f"{key_name(4)}.json.partial").write_text("tmp")
    reopened = BlockStore(tmp_path)
    assert reopened.block_keys() == [1]
    assert sorted(path.name for path in (tmp_path / "blocks").iterdir()) == [key_name(1), f"{key_name(1)}.sum"]
    assert list((tmp_path / "files").iterdir()) == []
    with pytest.raises(InvalidArgumentError, match=f"no block {key_name(2)}"):
        reopened.get_block(2)
