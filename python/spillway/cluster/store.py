"""One node's share of the cluster's file system: its blocks and the file
records it holds, in a directory of its own.

```text
DIR/blocks/KEY         a block's bytes, whole records and nothing else (a
                       map task reads it as an input file)
DIR/blocks/KEY.sum     "spillway-block 1 LENGTH CRC32\\n": present only once
                       the block is complete and synced
DIR/files/KEY.json     a file's record (its name, size, format, blocks) with
                       its CRC-32 on the last line
```

KEY is the ring key in 16 hexadecimal digits. Every file is written under
a temporary name, synced, renamed, and the directory synced: after a crash
a block is whole or absent (a block without its ``.sum`` is removed when
the store opens). Every read checks the length and the CRC-32 and raises
:class:`~spillway.errors.CorruptionError` naming the file, so the caller
can read a replica and repair this copy.

This class is plain Python; the cluster runs one per node as a Ray actor
(:mod:`spillway.cluster.fs`).
"""

from __future__ import annotations

import json
import os
import zlib
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..errors import CorruptionError, InvalidArgumentError

_SUM_MAGIC = "spillway-block"
_SUM_VERSION = 1
_PARTIAL = ".partial"


def key_name(key: int) -> str:
    """The file name of ring key ``key``."""
    return f"{key:016x}"


class BlockStore:
    """The blocks and file records one node holds."""

    def __init__(self, directory: os.PathLike):
        self.directory = Path(directory)
        self.blocks = self.directory / "blocks"
        self.files = self.directory / "files"
        for folder in (self.blocks, self.files):
            folder.mkdir(parents=True, exist_ok=True)
        self._recover()

    # Blocks.

    def put_block(self, key: int, data: Any, crc: Optional[int] = None) -> int:
        """Stores the block ``key`` (bytes or any buffer) durably; returns
        its length. ``crc``, when given, is the CRC-32 the block must have
        (a copy damaged on its way here is refused). Writing a block it
        holds again replaces it."""
        view = memoryview(data).cast("B")
        name = key_name(key)
        if crc is not None and zlib.crc32(view) != crc:
            raise CorruptionError(
                f"block {name} for {self.blocks} arrived damaged (CRC-32 {zlib.crc32(view):08x}, expected {crc:08x})"
            )
        # The old sum goes first, so a crash in between leaves no sum that
        # belongs to other bytes.
        _remove(self.blocks / f"{name}.sum")
        _write_durably(self.blocks / name, view)
        _write_durably(self.blocks / f"{name}.sum", _sum_line(view).encode())
        _sync_directory(self.blocks)
        return len(view)

    def get_block(self, key: int, crc: Optional[int] = None) -> bytes:
        """The block ``key``, checked against its sum (and against ``crc``,
        the CRC-32 its file's record gives, when given)."""
        length, recorded = self._sum(key)
        path = self.block_path(key)
        if crc is not None and recorded != crc:
            raise CorruptionError(f"{path}: holds another version of the block (CRC-32 {recorded:08x}, not {crc:08x})")
        crc = recorded
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise CorruptionError(f"{path}: the block is missing but its sum is present") from None
        _check(path, data, length, crc)
        return data

    def check_block(self, key: int) -> None:
        """Reads the block ``key`` and checks it (raises as :meth:`get_block`)."""
        self.get_block(key)

    def block_path(self, key: int) -> Path:
        """Where the block ``key``'s bytes are (for readers on this node)."""
        return self.blocks / key_name(key)

    def block_sum(self, key: int) -> Dict[str, int]:
        """The length and CRC-32 recorded for the block ``key``."""
        length, crc = self._sum(key)
        return {"length": length, "crc32": crc}

    def has_block(self, key: int) -> bool:
        return (self.blocks / f"{key_name(key)}.sum").exists()

    def delete_block(self, key: int) -> bool:
        """Removes the block ``key``; False when it was not here."""
        name = key_name(key)
        held = _remove(self.blocks / f"{name}.sum")
        _remove(self.blocks / name)
        _sync_directory(self.blocks)
        return held

    def delete_blocks(self, keys: List[int]) -> int:
        """Removes every block of ``keys`` held here; returns how many were."""
        held = 0
        for key in keys:
            name = key_name(key)
            held += _remove(self.blocks / f"{name}.sum")
            _remove(self.blocks / name)
        _sync_directory(self.blocks)
        return held

    def block_keys(self) -> List[int]:
        """The keys of every complete block here."""
        return sorted(int(path.name[: -len(".sum")], 16) for path in self.blocks.glob("*.sum"))

    def bytes_held(self) -> int:
        return sum(self._sum(key)[0] for key in self.block_keys())

    def usage(self) -> Dict[str, int]:
        """Blocks, their bytes and file records held here."""
        keys = self.block_keys()
        return {"blocks": len(keys), "bytes": sum(self._sum(key)[0] for key in keys), "files": len(self.file_keys())}

    # File records.

    def put_file(self, key: int, record: Dict[str, Any]) -> None:
        """Stores a file's record (JSON-serializable) under its name's key."""
        text = json.dumps(record, sort_keys=True)
        body = f"{text}\n{zlib.crc32(text.encode()):08x}\n"
        _write_durably(self.files / f"{key_name(key)}.json", body.encode())
        _sync_directory(self.files)

    def get_file(self, key: int) -> Optional[Dict[str, Any]]:
        """The file record stored under ``key``, or None."""
        path = self.files / f"{key_name(key)}.json"
        try:
            body = path.read_text()
        except FileNotFoundError:
            return None
        lines = body.split("\n")
        if len(lines) != 3 or lines[2] != "" or not _is_hex(lines[1]):
            raise CorruptionError(f"{path}: not a file record (its last line must be its CRC-32)")
        if zlib.crc32(lines[0].encode()) != int(lines[1], 16):
            raise CorruptionError(f"{path}: the file record fails its CRC-32")
        return json.loads(lines[0])

    def delete_file(self, key: int) -> bool:
        held = _remove(self.files / f"{key_name(key)}.json")
        _sync_directory(self.files)
        return held

    def file_keys(self) -> List[int]:
        return sorted(int(path.stem, 16) for path in self.files.glob("*.json"))

    def file_records(self) -> List[Dict[str, Any]]:
        """Every good file record here (a damaged one is skipped: the
        file's other holders have it, and reading it repairs this copy)."""
        records = []
        for key in self.file_keys():
            try:
                record = self.get_file(key)
            except CorruptionError:
                continue
            if record is not None:
                records.append(record)
        return records

    # Internals.

    def _sum(self, key: int):
        path = self.blocks / f"{key_name(key)}.sum"
        try:
            line = path.read_text()
        except FileNotFoundError:
            raise InvalidArgumentError(f"no block {key_name(key)} in {self.blocks}") from None
        fields = line.split()
        if (
            len(fields) != 4
            or fields[0] != _SUM_MAGIC
            or fields[1] != str(_SUM_VERSION)
            or not fields[2].isdigit()
            or not _is_hex(fields[3])
            or not line.endswith("\n")
        ):
            raise CorruptionError(f"{path}: not a block sum ({line[:80]!r})")
        return int(fields[2]), int(fields[3], 16)

    def _recover(self) -> None:
        """Removes what a crash left: temporary files, and blocks whose sum
        was never written."""
        for folder in (self.blocks, self.files):
            for path in folder.glob(f"*{_PARTIAL}"):
                path.unlink()
        for path in self.blocks.iterdir():
            if path.suffix != ".sum" and not path.with_name(f"{path.name}.sum").exists():
                path.unlink()


def _sum_line(view: memoryview) -> str:
    return f"{_SUM_MAGIC} {_SUM_VERSION} {len(view)} {zlib.crc32(view):08x}\n"


def _check(path: Path, data: bytes, length: int, crc: int) -> None:
    if len(data) != length:
        raise CorruptionError(f"{path}: {len(data)} bytes, but its sum records {length}")
    if zlib.crc32(data) != crc:
        raise CorruptionError(f"{path}: the block fails its CRC-32 (recorded {crc:08x}, read {zlib.crc32(data):08x})")


def _is_hex(text: str) -> bool:
    return len(text) == 8 and all(character in "0123456789abcdef" for character in text)


def _write_durably(path: Path, data) -> None:
    partial = path.with_name(path.name + _PARTIAL)
    with open(partial, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(partial, path)


def _sync_directory(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _remove(path: Path) -> bool:
    try:
        path.unlink()
        return True
    except FileNotFoundError:
        return False
