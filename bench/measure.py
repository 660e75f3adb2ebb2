"""Measuring one process, and the machine it runs on.

`run_once` runs a command to completion as a child process and measures it:
wall time from time.perf_counter, CPU time and block I/O from os.wait4's
rusage, peak RSS from GNU time, and bytes read and written from the child's
/proc/<pid>/io, read after it exited but before it was reaped. Around it: the
page cache (dropped before a cold run), cgroup v1 memory groups (a limit that
counts the page cache) and a description of the machine and the source tree.
"""

from __future__ import annotations

import datetime
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

REPO_ROOT = Path(__file__).resolve().parent.parent
OUTPUT_TAIL_CHARS = 600
MEMORY_CGROUP_ROOT = Path("/sys/fs/cgroup/memory")
GNU_TIME = "/usr/bin/time"


class BenchmarkFailure(Exception):
    """A contender failed or the benchmark cannot run; the message says why."""


def command_output(argv: list[str]) -> str:
    """The command's standard output, stripped; empty when it cannot run."""
    try:
        result = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout.strip()


def tail(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-OUTPUT_TAIL_CHARS:].decode("utf-8", errors="replace")


# ---------------------------------------------------------------------------
# One process


def read_proc_io(pid: int) -> dict[str, int]:
    counters: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            key, value = line.split(":")
            counters[key.strip()] = int(value)
    except (OSError, ValueError):
        pass
    return counters


def run_once(
    argv: list[str],
    work_dir: Path,
    log_prefix: Path,
    preexec: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Run argv to completion and measure it.

    The command runs under GNU time, which only reports the child's peak RSS
    (%M): the rusage that os.wait4 returns for our own child would include the
    harness's RSS, because the kernel carries a process's high-water mark across
    exec (a Python parent makes every child look 14+ MiB big; GNU time, ~1 MiB).
    Everything else comes from our child: os.waitid(WNOWAIT) leaves it a zombie
    whose /proc/<pid>/io holds its final counters (its own plus those of the
    children it reaped), then os.wait4 reaps it and returns CPU time and block I/O.
    """
    stdout_path = log_prefix.with_suffix(".stdout")
    stderr_path = log_prefix.with_suffix(".stderr")
    rss_path = log_prefix.with_suffix(".rss")
    wrapped = [GNU_TIME, "-f", "%M", "-o", str(rss_path), "--", *argv]
    with open(stdout_path, "wb") as stdout, open(stderr_path, "wb") as stderr:
        started = time.perf_counter()
        try:
            # preexec (joining a cgroup) is safe: the harness runs no threads.
            child = subprocess.Popen(wrapped, cwd=work_dir, stdout=stdout, stderr=stderr, preexec_fn=preexec)  # noqa: PLW1509
        except OSError as error:
            raise BenchmarkFailure(f"cannot start {GNU_TIME}: {error}") from error
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
        wall_s = time.perf_counter() - started
        io = read_proc_io(child.pid)
        _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    return {
        "wall_s": wall_s,
        "exit_code": child.returncode,
        "peak_rss_kib": read_peak_rss_kib(rss_path),
        "user_s": usage.ru_utime,
        "sys_s": usage.ru_stime,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "inblock_bytes": usage.ru_inblock * 512,
        "oublock_bytes": usage.ru_oublock * 512,
        "read_bytes": io.get("read_bytes"),
        "write_bytes": io.get("write_bytes"),
        "cancelled_write_bytes": io.get("cancelled_write_bytes"),
        "rchar": io.get("rchar"),
        "wchar": io.get("wchar"),
        "stdout_tail": tail(stdout_path),
        "stderr_tail": tail(stderr_path),
    }


def read_peak_rss_kib(path: Path) -> int:
    """The last line GNU time wrote (earlier lines say how the command ended)."""
    try:
        return int(path.read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        return 0


# ---------------------------------------------------------------------------
# Page cache and cgroup


def drop_page_cache() -> bool:
    """Write back dirty pages, then drop clean ones. False when not permitted."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as control:
            control.write("3\n")
    except OSError:
        return False
    return True


def create_memory_cgroup(limit_bytes: int, suffix: str = "") -> Path:
    """A cgroup v1 memory group with the limit (which counts page cache).

    `suffix` tells apart groups that exist at once: the invocation's group and
    the group of a part whose variant has a limit of its own.
    """
    if not (MEMORY_CGROUP_ROOT / "memory.limit_in_bytes").exists():
        raise BenchmarkFailure(f"a memory limit needs the cgroup v1 memory controller at {MEMORY_CGROUP_ROOT}")
    group = MEMORY_CGROUP_ROOT / (f"spillway-bench-{os.getpid()}" + (f"-{suffix}" if suffix else ""))
    try:
        group.mkdir()
        (group / "memory.limit_in_bytes").write_text(str(limit_bytes))
    except OSError as error:
        raise BenchmarkFailure(f"cannot create memory cgroup {group}: {error}") from error
    return group


def joiner(group: Path) -> Callable[[], None]:
    """A preexec function that moves the child into the cgroup before it runs its command."""
    procs_file = str(group / "cgroup.procs")

    def join() -> None:
        with open(procs_file, "w") as procs:
            procs.write(str(os.getpid()))

    return join


def reset_cgroup_peak(group: Path) -> None:
    (group / "memory.max_usage_in_bytes").write_text("0")


def cgroup_peak_bytes(group: Path) -> int:
    return int((group / "memory.max_usage_in_bytes").read_text())


def remove_memory_cgroup(group: Path) -> None:
    for _ in range(10):
        try:
            group.rmdir()
            return
        except OSError:
            time.sleep(0.2)
    print(f"warning: could not remove cgroup {group}", file=sys.stderr)


# ---------------------------------------------------------------------------
# The machine and the source tree


def machine_info(data_dir: Path) -> dict[str, Any]:
    cpu_model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_bytes = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_bytes = int(line.split()[1]) * 1024
    except OSError:
        pass
    mount = {"device": "unknown", "mount_point": "/", "fstype": "unknown", "options": ""}
    try:
        resolved = str(data_dir.resolve())
        for line in Path("/proc/mounts").read_text().splitlines():
            device, mount_point, fstype, options = line.split()[:4]
            inside = resolved == mount_point or resolved.startswith(mount_point.rstrip("/") + "/")
            if inside and len(mount_point) >= len(mount["mount_point"]):
                mount = {"device": device, "mount_point": mount_point, "fstype": fstype, "options": options}
    except OSError:
        pass
    return {
        "hostname": platform.node(),
        "cpu_model": cpu_model,
        "cpu_cores": os.cpu_count(),
        "memory_bytes": memory_bytes,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "disk_device": mount["device"],
        "disk_fstype": mount["fstype"],
        "disk_mount_options": mount["options"],
        "disk_free_bytes": shutil.disk_usage(data_dir).free,
        "load_average": [round(value, 2) for value in os.getloadavg()],
        "dd_version": command_output(["dd", "--version"]).splitlines()[0] if shutil.which("dd") else "",
    }


def source_info() -> dict[str, Any]:
    """The commit of the repository the harness runs from, and whether tracked files differ from it."""
    commit = command_output(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"]) or "unknown"
    # Names only: porcelain lines start with a status column that stripping would eat.
    changes = command_output(
        ["git", "--no-optional-locks", "-C", str(REPO_ROOT), "diff", "HEAD", "--name-only"]
    ).splitlines()
    return {
        "commit": commit,
        "dirty": bool(changes),
        "changed_files": changes[:20],
        "described": commit + ("-dirty" if changes else ""),
    }


def file_modified(path: Path) -> str:
    return datetime.datetime.fromtimestamp(path.stat().st_mtime, datetime.timezone.utc).isoformat(timespec="seconds")
