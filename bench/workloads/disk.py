"""The disk's own speed as contenders: dd writing, reading, and both at once, the same number of bytes."""

from __future__ import annotations

from declarations import Contender
from workloads.requirements import COREUTILS_DD


def dd_write(path: str, cleanup: bool = False) -> Contender:
    """The disk's synced write rate: dd writing {bytes} zeros to `path`."""
    return Contender(
        name="dd write",
        role="peer",
        command=[
            "dd", "if=/dev/zero", f"of={path}", "bs=4M", "count={bytes}", "iflag=count_bytes", "conv=fdatasync",
        ],
        writes=path,
        cleanup=[path] if cleanup else [],
        requires=[COREUTILS_DD],
    )


def dd_read_while_writing(read_path: str, write_path: str) -> Contender:
    """The disk reading `read_path` and writing {bytes} zeros to `write_path` at once (synced)."""
    return Contender(
        name="dd read+write",
        role="peer",
        command=[
            "sh", "-c",
            f"dd if={read_path} of=/dev/null bs=4M 2>/dev/null & reader=$!; "
            f"dd if=/dev/zero of={write_path} bs=4M count={{bytes}} iflag=count_bytes conv=fdatasync "
            "&& wait $reader",
        ],
        writes=write_path,
        cleanup=[write_path],
        requires=[COREUTILS_DD],
    )


def dd_read(path: str) -> Contender:
    """The disk's read rate: dd reading `path` (with iflag=direct when the cache cannot be dropped)."""
    return Contender(
        name="dd read",
        role="peer",
        command=["dd", f"if={path}", "of=/dev/null", "bs=4M"],
        command_warm_cache=["dd", f"if={path}", "of=/dev/null", "bs=4M", "iflag=direct"],
        requires=[COREUTILS_DD],
    )
