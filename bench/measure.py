"""Measuring one process, and the machine it runs on.

`run_once` runs a command to completion as a child process and measures it:
wall time from time.perf_counter, CPU time and block I/O from os.wait4's
rusage, peak RSS from GNU time, and bytes read and written from the child's
/proc/<pid>/io, read after it exited but before it was reaped. With a time
limit, a command still running when it ends is killed with its whole process
group. Around it: the page cache (dropped before a cold run), cgroup v1 memory
groups (a limit that counts the page cache) and a description of the machine
and the source tree.
"""

from __future__ import annotations

import datetime
import os
import platform
import select
import shutil
import signal
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
    timeout_s: float | None = None,
    cgroup: Path | None = None,
) -> dict[str, Any]:
    """Run argv to completion and measure it.

    The command runs under GNU time, which only reports the child's peak RSS
    (%M): the rusage that os.wait4 returns for our own child would include the
    harness's RSS, because the kernel carries a process's high-water mark across
    exec (a Python parent makes every child look 14+ MiB big; GNU time, ~1 MiB).
    Everything else comes from our child: os.waitid(WNOWAIT) leaves it a zombie
    whose /proc/<pid>/io holds its final counters (its own plus those of the
    children it reaped), then os.wait4 reaps it and returns CPU time and block I/O.

    With `timeout_s`, the child starts a process group of its own; when it is
    still running after `timeout_s` seconds, the whole group is killed (SIGKILL),
    and so is every process left in `cgroup` (the memory group the run was in),
    and the result has "timed_out": True. The group is also killed when the
    harness itself is interrupted while waiting (the terminal's Ctrl-C no longer
    reaches a group of its own).
    """
    stdout_path = log_prefix.with_suffix(".stdout")
    stderr_path = log_prefix.with_suffix(".stderr")
    rss_path = log_prefix.with_suffix(".rss")
    wrapped = [GNU_TIME, "-f", "%M", "-o", str(rss_path), "--", *argv]
    timed_out = False
    with open(stdout_path, "wb") as stdout, open(stderr_path, "wb") as stderr:
        started = time.perf_counter()
        try:
            # preexec (joining a cgroup) is safe: the harness runs no threads.
            child = subprocess.Popen(  # noqa: PLW1509
                wrapped, cwd=work_dir, stdout=stdout, stderr=stderr, preexec_fn=preexec,
                process_group=0 if timeout_s is not None else None,
            )
        except OSError as error:
            raise BenchmarkFailure(f"cannot start {GNU_TIME}: {error}") from error
        if timeout_s is None:
            os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
        else:
            try:
                if not wait_for_exit(child.pid, timeout_s):
                    timed_out = True
                    kill_process_group(child.pid, cgroup)
                    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)
            except BaseException:
                kill_process_group(child.pid, cgroup)
                os.wait4(child.pid, 0)
                raise
        wall_s = time.perf_counter() - started
        io = read_proc_io(child.pid)
        _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if timed_out:
        # The leader is reaped; its group's other members may still be on their way out.
        wait_until_gone(child.pid, cgroup)
    outcome = {
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
    if timed_out:
        outcome["timed_out"] = True
    return outcome


def exited(pid: int) -> bool:
    """Whether our child has exited (it stays a zombie: WNOWAIT)."""
    return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None


def wait_for_exit(pid: int, timeout_s: float) -> bool:
    """Waits up to timeout_s for our child to exit, leaving it unreaped; False if it is still running.

    A pidfd wakes us the moment it exits, so the wall time is not rounded up to a polling step;
    where there is none (Linux before 5.3), it polls every 10 ms.
    """
    deadline = time.monotonic() + timeout_s
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    if pidfd is not None:
        try:
            poller = select.poll()
            poller.register(pidfd, select.POLLIN)
            while not exited(pid):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                poller.poll(max(1, int(left * 1000 + 0.999)))
            return True
        finally:
            os.close(pidfd)
    while not exited(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def cgroup_members(group: Path | None) -> list[int]:
    """The processes in a cgroup (none when it is not one: no cgroup.procs)."""
    if group is None:
        return []
    try:
        return [int(line) for line in (group / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def kill_process_group(pgid: int, cgroup: Path | None = None) -> None:
    """SIGKILL to a process group, and to every process in the run's cgroup (one that left the group)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in cgroup_members(cgroup):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def group_members(pgid: int) -> list[int]:
    """The live (not zombie) processes of a process group, from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses, so split after the last ")".
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[0] not in ("Z", "X") and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def wait_until_gone(pgid: int, cgroup: Path | None, patience_s: float = 10.0) -> None:
    """Waits (killing again) until no process of the group, or of the cgroup, is left; warns after patience_s."""
    deadline = time.monotonic() + patience_s
    while group_members(pgid) or cgroup_members(cgroup):
        if time.monotonic() >= deadline:
            print(f"warning: processes of the stopped run (process group {pgid}) are still there", file=sys.stderr)
            return
        kill_process_group(pgid, cgroup)
        time.sleep(0.05)


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
