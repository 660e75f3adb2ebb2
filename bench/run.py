#!/usr/bin/env python3
"""Run a benchmark workload on Spillway and its peers, side by side.

    python3 bench/run.py WORKLOAD [--size 4G] [--runs 3] [--dir DIR] [--out docs/benchmarks]
                                  [--spillway PATH] [--memory-limit SIZE] [--warm]
    python3 bench/run.py WORKLOAD --size 2G --runs 3 --size 10G --runs 1 ...
    python3 bench/run.py --list

Every contender of the workload runs `--runs` times, alternating between contenders
(A B A B ...); with several sizes, or a workload with variants, each (size, variant)
is a part of the report, run in its own data directory. Each run is one child process: wall time from time.perf_counter, CPU
time and block I/O from os.wait4's rusage, peak RSS from GNU time (see run_once), and
bytes read/written from the child's /proc/<pid>/io read after it exited but before it
was reaped. The page cache is
dropped before every run when the kernel lets us. Results go to
docs/benchmarks/<workload>.{json,md,png} and the index docs/benchmarks/README.md.
See bench/README.md for the method.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workloads import RECORD_BYTES, WORKLOADS, Comparison, Contender, Requirement, Step, Variant, Workload

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT_DIR = REPO_ROOT / "docs" / "benchmarks"
MEGABYTE = 1_000_000
OUTPUT_TAIL_CHARS = 600
MEMORY_CGROUP_ROOT = Path("/sys/fs/cgroup/memory")
GNU_TIME = "/usr/bin/time"
# The harness itself needs GNU time (Debian package "time") to measure peak RSS.
HARNESS_REQUIREMENTS = [Requirement(executable=GNU_TIME, source="apt", package="time")]


class BenchmarkFailure(Exception):
    """A contender failed or the benchmark cannot run; the message says why."""


# ---------------------------------------------------------------------------
# Small helpers


def parse_size(text: str) -> int:
    """'4G' -> 4 GiB, '100M', '64k', '12345' (bytes). Binary units."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(?:i?[bB])?\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (use e.g. 4G, 512M, 100k)")
    number, unit = match.groups()
    factor = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}[unit.lower()]
    return int(float(number) * factor)


def format_bytes(count: float) -> str:
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= factor:
            return f"{count / factor:.2f} {unit}"
    return f"{count:.0f} B"


def fill(template: list[str], params: dict[str, str]) -> list[str]:
    try:
        return [argument.format(**params) for argument in template]
    except KeyError as error:
        raise BenchmarkFailure(f"template {template} uses an unknown placeholder {error}") from error


def as_step(step: list[str] | Step) -> Step:
    return step if isinstance(step, Step) else Step(command=list(step))


def all_commands(workload: Workload) -> list[list[str]]:
    """Every command template of the workload: contenders, setup, variants, prepare and validate steps."""
    steps = list(workload.setup) + [step for variant in workload.variants for step in variant.setup]
    for contender in workload.contenders:
        steps += contender.prepare + contender.validate
    return [c.command for c in workload.contenders] + [as_step(step).command for step in steps]


def uses_spillway(workload: Workload) -> bool:
    return any("{spillway}" in argument for command in all_commands(workload) for argument in command)


def tail(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-OUTPUT_TAIL_CHARS:].decode("utf-8", errors="replace")


def command_output(argv: list[str]) -> str:
    try:
        result = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout.strip()


# ---------------------------------------------------------------------------
# Machine, page cache, cgroup


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
        "dd_version": command_output(["dd", "--version"]).splitlines()[0] if shutil.which("dd") else "",
    }


def drop_page_cache() -> bool:
    """Write back dirty pages, then drop clean ones. False when not permitted."""
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as control:
            control.write("3\n")
    except OSError:
        return False
    return True


def create_memory_cgroup(limit_bytes: int) -> Path:
    """A cgroup v1 memory group with the limit (which counts page cache)."""
    if not (MEMORY_CGROUP_ROOT / "memory.limit_in_bytes").exists():
        raise BenchmarkFailure(f"--memory-limit needs the cgroup v1 memory controller at {MEMORY_CGROUP_ROOT}")
    group = MEMORY_CGROUP_ROOT / f"spillway-bench-{os.getpid()}"
    try:
        group.mkdir()
        (group / "memory.limit_in_bytes").write_text(str(limit_bytes))
    except OSError as error:
        raise BenchmarkFailure(f"cannot create memory cgroup {group}: {error}") from error
    return group


def remove_memory_cgroup(group: Path) -> None:
    for _ in range(10):
        try:
            group.rmdir()
            return
        except OSError:
            time.sleep(0.2)
    print(f"warning: could not remove cgroup {group}", file=sys.stderr)


# ---------------------------------------------------------------------------
# Binaries and peers


def resolve_spillway(explicit: str | None) -> Path:
    """--spillway, else target/release/spillway (built if missing), else PATH."""
    if explicit:
        path = Path(explicit).resolve()
        if not os.access(path, os.X_OK):
            raise BenchmarkFailure(f"--spillway {explicit}: not an executable file")
        return path
    release = REPO_ROOT / "target" / "release" / "spillway"
    if not release.exists() and shutil.which("cargo") and (REPO_ROOT / "Cargo.toml").exists():
        print("building spillway: cargo build --release -p spillway-cli", flush=True)
        subprocess.run(["cargo", "build", "--release", "-p", "spillway-cli"], cwd=REPO_ROOT, check=False)
    if release.exists():
        return release
    on_path = shutil.which("spillway")
    if on_path:
        return Path(on_path).resolve()
    raise BenchmarkFailure("no spillway binary: pass --spillway, or build target/release/spillway")


def spillway_info(path: Path) -> dict[str, Any]:
    resolved = str(path.resolve())
    if "/target/debug/" in resolved:
        profile = "debug"
    elif "/target/release/" in resolved:
        profile = "release"
    else:
        profile = "unknown (not in a cargo target directory)"
    commit = command_output(["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"])
    changes = command_output(
        ["git", "--no-optional-locks", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"]
    )
    built = datetime.datetime.fromtimestamp(path.stat().st_mtime, datetime.timezone.utc)
    return {
        "path": resolved,
        "version": command_output([resolved, "--version"]) or "unknown",
        "profile": profile,
        "commit": commit + ("-dirty" if changes else "") if commit else "unknown",
        "binary_modified": built.isoformat(timespec="seconds"),
    }


def warn_debug_build(path: str) -> None:
    banner = "!" * 72
    print(
        f"\n{banner}\n!! WARNING: {path} is a DEBUG build.\n"
        f"!! Its numbers say nothing about Spillway's speed. Use a release build:\n"
        f"!!     cargo build --release -p spillway-cli\n{banner}\n",
        file=sys.stderr,
        flush=True,
    )


def ensure_requirements(requirements: list[Requirement]) -> None:
    """Install missing peers from their registries (apt-get, pip, cargo install)."""
    for requirement in requirements:
        if requirement_present(requirement):
            continue
        needed = requirement.executable or f"Python module {requirement.module}"
        print(f"installing {requirement.package} ({requirement.source}) for {needed}", flush=True)
        if requirement.source == "apt":
            apt_install(requirement.package)
        elif requirement.source == "pip":
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", requirement.package], check=False)
        elif requirement.source == "cargo":
            subprocess.run(["cargo", "install", "--locked", requirement.package], check=False)
        else:
            raise BenchmarkFailure(f"unknown package source {requirement.source!r}")
        importlib.invalidate_caches()
        if not requirement_present(requirement):
            raise BenchmarkFailure(f"could not install {needed} from {requirement.source} {requirement.package}")


def apt_install(package: str) -> bool:
    """`apt-get install` of a Debian package, updating the package lists once if it is not found."""
    install = ["apt-get", "install", "-y", "-q", package]
    if subprocess.run(install, check=False).returncode == 0:
        return True
    subprocess.run(["apt-get", "update", "-q"], check=False)
    return subprocess.run(install, check=False).returncode == 0


def ensure_libclang() -> None:
    """bindgen (RocksDB's build script) needs libclang: Debian's libclang-dev."""
    # libclang itself (libclang.so, libclang-14.so.1), not libclang-cpp, which
    # other packages bring alone and bindgen cannot use.
    libclang = re.compile(r"\blibclang(-[0-9][0-9.]*)?\.so")
    listing = command_output(["ldconfig", "-p"])
    llvm_libs = [path.name for path in Path("/usr/lib").glob("llvm-*/lib/libclang*.so*")]
    if libclang.search(listing) or any(libclang.search(name) for name in llvm_libs):
        return
    print("installing libclang-dev (apt) for RocksDB's bindgen", flush=True)
    if not apt_install("libclang-dev"):
        raise BenchmarkFailure("could not install libclang-dev (needed to build RocksDB)")


# RocksDB's own build (CMake) finds sched_getcpu and, with its default
# PORTABLE=0, compiles for the host's SSE4.2 and carry-less multiply; the
# `rocksdb` crate's build script does neither. Without
# ROCKSDB_SCHED_GETCPU_PRESENT every per-core counter (statistics, the
# memtable's arena) asks for the core id with CPUID, which traps to the
# hypervisor on a virtual machine: about 60 us per put, 30x slower writes.
ROCKSDB_CXXFLAGS = "-DROCKSDB_SCHED_GETCPU_PRESENT -DHAVE_SSE42 -msse4.2 -DHAVE_PCLMUL -mpclmul"


def rocksdb_build_environment(target_dir: Path) -> dict[str, str]:
    """The environment for a benchmark driver's cargo build that compiles RocksDB as its own build would."""
    return dict(os.environ, CARGO_TARGET_DIR=str(target_dir), CXXFLAGS=ROCKSDB_CXXFLAGS)


def requirement_present(requirement: Requirement) -> bool:
    """The executable is on PATH and the module (if any) imports in this interpreter."""
    if requirement.executable and not shutil.which(requirement.executable):
        return False
    if requirement.module:
        try:
            return importlib.util.find_spec(requirement.module) is not None
        except (ImportError, ValueError):
            return False
    return bool(requirement.executable)


def import_pyplot() -> Any:
    """matplotlib.pyplot with the Agg backend; pip-installs matplotlib if missing."""
    try:
        import matplotlib
    except ImportError:
        print("installing matplotlib (pip)", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "matplotlib"], check=True)
        import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot

    return pyplot


# ---------------------------------------------------------------------------
# Running one contender once


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
# Running a workload


def summarize(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    summary: dict[str, dict[str, float]] = {}
    keys = ("wall_s", "throughput_mb_s", "peak_rss_kib", "cpu_s", "read_bytes", "write_bytes", "cgroup_peak_bytes")
    for key in keys:
        values = [run[key] for run in runs if run.get(key) is not None]
        if values:
            summary[key] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    return summary


def compare(comparison: Comparison, contenders: dict[str, dict[str, Any]]) -> dict[str, Any]:
    ours = contenders[comparison.contender]
    theirs = contenders[comparison.peer]
    ours_mb_s = ours["summary"]["throughput_mb_s"]["median"]
    theirs_mb_s = theirs["summary"]["throughput_mb_s"]["median"]
    per_round = [a["throughput_mb_s"] / b["throughput_mb_s"] for a, b in zip(ours["runs"], theirs["runs"])]
    ratio = ours_mb_s / theirs_mb_s
    return {
        "label": comparison.label,
        "contender": comparison.contender,
        "peer": comparison.peer,
        "contender_mb_s": ours_mb_s,
        "peer_mb_s": theirs_mb_s,
        "ratio": ratio,
        "per_round_ratios": per_round,
        "target": comparison.target,
        "meets_target": None if comparison.target is None else ratio >= comparison.target,
    }


def disk_bound(workload: Workload, contenders: dict[str, dict[str, Any]], data_bytes: int) -> dict[str, Any] | None:
    """The disk-bound limit of a 2-IO operation on this data and each contender's fraction of it."""
    spec = workload.disk_bound
    if spec is None:
        return None
    read_s = contenders[spec.read]["summary"]["wall_s"]["median"]
    write_s = contenders[spec.write]["summary"]["wall_s"]["median"]
    passes = 1 if data_bytes <= spec.memory_budget_bytes else 2
    limit_s = passes * (read_s + write_s)
    fractions = {name: limit_s / contenders[name]["summary"]["wall_s"]["median"] for name in spec.contenders}
    targets = {}
    if passes == 2:
        for name, target in spec.targets.items():
            targets[name] = {"target": target, "fraction": fractions[name], "met": fractions[name] >= target}
    # Out of memory each pass reads and writes at once: the disk doing both
    # together is the tighter limit. In memory every read precedes every write.
    overlapped = None
    if spec.read_write and passes == 2:
        read_write_s = contenders[spec.read_write]["summary"]["wall_s"]["median"]
        overlapped_s = passes * read_write_s
        overlapped = {
            "contender": spec.read_write,
            "mb_s": data_bytes / read_write_s / MEGABYTE,
            "limit_s": overlapped_s,
            "fractions": {
                name: overlapped_s / contenders[name]["summary"]["wall_s"]["median"] for name in spec.contenders
            },
        }
    return {
        "read_contender": spec.read,
        "write_contender": spec.write,
        "read_mb_s": data_bytes / read_s / MEGABYTE,
        "write_mb_s": data_bytes / write_s / MEGABYTE,
        "memory_budget_bytes": spec.memory_budget_bytes,
        "in_memory": passes == 1,
        "passes": passes,
        "limit_s": limit_s,
        "fractions": fractions,
        "targets": targets,
        "overlapped": overlapped,
        # The least time a 2-IO sort can take on this disk, as measured here.
        "floor_s": overlapped["limit_s"] if overlapped else limit_s,
    }


def size_plan(size_bytes: int | list[int], runs: int | list[int]) -> list[tuple[int, int]]:
    """Pairs (size, runs): one runs count for every size, or one per size in order."""
    sizes = [size_bytes] if isinstance(size_bytes, int) else list(size_bytes)
    counts = [runs] if isinstance(runs, int) else list(runs)
    if len(counts) == 1:
        counts = counts * len(sizes)
    if not sizes or len(counts) != len(sizes):
        raise BenchmarkFailure("give --runs once, or once for every --size (paired in order)")
    return list(zip(sizes, counts))


def run_workload(
    workload: Workload,
    size_bytes: int | list[int],
    runs: int | list[int],
    base_dir: Path,
    out_dir: Path,
    spillway: str | None = None,
    memory_limit_bytes: int | None = None,
    drop_cache: bool = True,
    reproduce: str | None = None,
) -> dict[str, Any]:
    """Run every contender `runs` times (alternating), write the reports, return the results.

    `size_bytes` and `runs` may be lists (several sizes). Every (size, variant) pair
    is one part, run in its own data directory, deleted afterwards. A single part
    without variants gives the flat report (its fields at the top level); several
    give a report with a `parts` list.
    """
    plan = size_plan(size_bytes, runs)
    for size, count in plan:
        if size // RECORD_BYTES < 1 or count < 1:
            raise BenchmarkFailure("need at least one record and one run")
    names = [contender.name for contender in workload.contenders]
    if len(set(names)) != len(names):
        raise BenchmarkFailure(f"workload {workload.name}: contender names repeat: {names}")
    for comparison in workload.comparisons:
        if comparison.contender not in names or comparison.peer not in names:
            raise BenchmarkFailure(
                f"workload {workload.name}: comparison {comparison.label!r} names an unknown contender"
            )
    if workload.disk_bound is not None:
        spec = workload.disk_bound
        unknown = [name for name in [spec.read, spec.write, *spec.contenders] if name not in names]
        if unknown:
            raise BenchmarkFailure(f"workload {workload.name}: disk_bound names unknown contenders {unknown}")
    if base_dir.resolve().is_relative_to(REPO_ROOT) and (REPO_ROOT / ".git").exists():
        raise BenchmarkFailure(f"data directory {base_dir} is inside the repository; use a scratch directory")
    created_base_dir = not base_dir.exists()
    base_dir.mkdir(parents=True, exist_ok=True)
    try:
        largest = max(size for size, _ in plan) // RECORD_BYTES * RECORD_BYTES
        if workload.scratch_bytes_per_data_byte is not None:
            needed_bytes = int(workload.scratch_bytes_per_data_byte * largest) + 2**30
        else:
            needed_bytes = sum(1 for contender in workload.contenders if contender.writes) * largest + 2**30
        if shutil.disk_usage(base_dir).free < needed_bytes:
            raise BenchmarkFailure(f"{base_dir} has less than {format_bytes(needed_bytes)} free")

        spillway_meta: dict[str, Any] | None = None
        params = {
            "dir": "",
            "records": "0",
            "bytes": "0",
            "spillway": "spillway",
            "python": sys.executable,
            "bench": str(Path(__file__).resolve().parent),
        }
        if uses_spillway(workload):
            spillway_path = resolve_spillway(spillway)
            spillway_meta = spillway_info(spillway_path)
            params["spillway"] = spillway_meta["path"]
            if spillway_meta["profile"] == "debug":
                warn_debug_build(spillway_meta["path"])
        ensure_requirements(HARNESS_REQUIREMENTS)
        for contender in workload.contenders:
            ensure_requirements(contender.requires)

        cache_droppable = drop_cache and drop_page_cache()
        cache = "cold" if cache_droppable else "warm"
        machine = machine_info(base_dir)
        print_header(workload, machine, spillway_meta, plan, cache, base_dir, memory_limit_bytes)
        if drop_cache and not cache_droppable:
            print("warning: cannot drop the page cache here (not root?); runs are cache-WARM", file=sys.stderr)

        cgroup = create_memory_cgroup(memory_limit_bytes) if memory_limit_bytes else None
        preexec = None
        if cgroup is not None:
            procs_file = str(cgroup / "cgroup.procs")

            def preexec() -> None:
                with open(procs_file, "w") as procs:
                    procs.write(str(os.getpid()))

        started = time.perf_counter()
        parts = []
        try:
            variants: list[Variant | None] = list(workload.variants) or [None]
            for size, count in plan:
                for variant in variants:
                    parts.append(
                        run_part(workload, variant, size, count, base_dir, params, cache_droppable, cgroup, preexec)
                    )
        finally:
            if cgroup is not None:
                remove_memory_cgroup(cgroup)
    finally:
        if created_base_dir and base_dir.exists() and not any(base_dir.iterdir()):
            base_dir.rmdir()

    common = {
        "workload": workload.name,
        "description": workload.description,
        "notes": workload.notes,
        "generated_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "reproduce": reproduce
        or f"python3 bench/run.py {workload.name} "
        + " ".join(f"--size {size} --runs {count}" for size, count in plan),
        "order": "alternating: every round runs each contender once, in the declared order",
        "cache": cache,
        "memory_limit_bytes": memory_limit_bytes,
        "throughput_unit": workload.throughput_unit,
        "benchmark_wall_s": time.perf_counter() - started,
        "machine": machine,
        "spillway": spillway_meta,
    }
    if len(parts) == 1 and not workload.variants:
        report = {**common, **parts[0]}
        del report["label"]
        del report["variant"]
    else:
        report = {**common, "parts": parts}
    write_reports(report, out_dir)
    return report


def run_part(
    workload: Workload,
    variant: Variant | None,
    size_bytes: int,
    runs: int,
    base_dir: Path,
    base_params: dict[str, str],
    cache_droppable: bool,
    cgroup: Path | None,
    preexec: Callable[[], None] | None,
) -> dict[str, Any]:
    """One size and variant: setup, then `runs` rounds of every contender; its data directory is deleted after."""
    records = size_bytes // RECORD_BYTES
    data_bytes = records * RECORD_BYTES
    label = format_bytes(data_bytes) + (f", {variant.name}" if variant else "")
    prefix = f"{workload.name}-" + (f"{variant.name}-" if variant else "")
    data_dir = Path(tempfile.mkdtemp(prefix=prefix, dir=base_dir))
    params = dict(base_params, dir=str(data_dir), records=str(records), bytes=str(data_bytes))
    if variant:
        params.update(variant.params)
    print(f"part       {label}: {records} records, {runs} runs per contender; data in {data_dir}", flush=True)
    results: dict[str, dict[str, Any]] = {}
    setup_log: list[dict[str, Any]] = []
    part_started = time.perf_counter()
    try:
        steps = list(workload.setup) + (list(variant.setup) if variant else [])
        for index, step in enumerate(steps):
            outcome = run_step(as_step(step), params, data_dir, f"setup-{index}", "setup step")
            setup_log.append(outcome)
        for contender in workload.contenders:
            template = contender.command
            if not cache_droppable and contender.command_warm_cache:
                template = contender.command_warm_cache
            results[contender.name] = {
                "name": contender.name,
                "role": contender.role,
                "command": fill(template, params),
                "runs": [],
            }
        failed: dict[str, str] = {}
        for round_index in range(runs):
            for contender in workload.contenders:
                if contender.name in failed:
                    continue
                entry = results[contender.name]
                try:
                    run = run_contender(
                        contender, entry["command"], params, data_dir, round_index, cache_droppable, cgroup, preexec
                    )
                except BenchmarkFailure as failure:
                    if not contender.may_fail:
                        raise
                    failed[contender.name] = failure_reason(str(failure))
                    print(f"[{round_index + 1}/{runs}] {contender.name} FAILED: {failed[contender.name]}", flush=True)
                    continue
                run["throughput_mb_s"] = data_bytes / run["wall_s"] / MEGABYTE
                run["cpu_s"] = run["user_s"] + run["sys_s"]
                entry["runs"].append(run)
                print(progress_line(round_index, runs, contender.name, run, data_bytes), flush=True)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)

    for entry in results.values():
        entry["summary"] = summarize(entry["runs"])
    # A failed peer leaves the tables and ratios; it is listed with its reason.
    measured = {name: entry for name, entry in results.items() if name not in failed}
    comparisons = [c for c in workload.comparisons if c.contender in measured and c.peer in measured]
    return {
        "label": label,
        "variant": None
        if variant is None
        else {"name": variant.name, "description": variant.description, "params": variant.params},
        "data_dir": str(data_dir),
        "data_bytes": data_bytes,
        "records": records,
        "runs_per_contender": runs,
        "setup": setup_log,
        "part_wall_s": time.perf_counter() - part_started,
        "contenders": list(measured.values()),
        "comparisons": [compare(comparison, measured) for comparison in comparisons],
        "failed": [
            {
                "name": name,
                "reason": reason,
                "comparisons": [
                    {"label": c.label, "contender": c.contender, "peer": c.peer, "target": c.target}
                    for c in workload.comparisons
                    if name in (c.contender, c.peer)
                ],
            }
            for name, reason in failed.items()
        ],
        "disk_bound": disk_bound(workload, measured, data_bytes),
    }


def failure_reason(message: str) -> str:
    """The line of a contender's failure that says why: the engine's error, else the first line
    with the last line the contender printed to standard error."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    for line in lines:
        if "Error" in line or "out of memory" in line or "killed" in line:
            return line[:300]
    if not lines:
        return "failed"
    stderr = message.split("\nstderr: ", 1)[1].split("\nstdout: ", 1)[0] if "\nstderr: " in message else ""
    last = next((line.strip() for line in reversed(stderr.splitlines()) if line.strip()), "")
    return (lines[0] + (f"; its last words: {last}" if last else "; it printed nothing on standard error"))[:300]


def run_step(step: Step, params: dict[str, str], data_dir: Path, slug: str, what: str) -> dict[str, Any]:
    """An untimed command (setup, prepare, validate): checked, and its captures added to params."""
    argv = fill(step.command, params)
    print(f"{what}: {' '.join(argv)}", flush=True)
    log_prefix = data_dir / slug
    outcome = run_once(argv, data_dir, log_prefix)
    printed = "".join(
        log_prefix.with_suffix(suffix).read_text(errors="replace") for suffix in (".stdout", ".stderr")
    )
    problem = None
    if outcome["exit_code"] not in step.exit_codes:
        problem = f"exit code {outcome['exit_code']}"
    elif step.expect_output:
        pattern = step.expect_output.format(**params)
        if not re.search(pattern, printed):
            problem = f"exit code {outcome['exit_code']} without printing /{pattern}/"
    if problem is None:
        for name, pattern in step.capture.items():
            match = re.search(pattern, printed)
            if not match:
                problem = f"no /{pattern}/ in its output to capture {{{name}}}"
                break
            params[name] = match.group(1)
    if problem:
        raise BenchmarkFailure(
            f"{what} failed ({problem}): {' '.join(argv)}\n"
            f"stderr: {outcome['stderr_tail']}\nstdout: {outcome['stdout_tail']}"
        )
    return {"command": argv, "wall_s": outcome["wall_s"], "exit_code": outcome["exit_code"]}


def run_contender(
    contender: Contender,
    argv: list[str],
    params: dict[str, str],
    data_dir: Path,
    round_index: int,
    cache_droppable: bool,
    cgroup: Path | None,
    preexec: Callable[[], None] | None,
) -> dict[str, Any]:
    """One measured run: prepare, fresh output file, synced disk, dropped cache, the command, validate, clean up."""
    slug = re.sub(r"[^a-z0-9]+", "-", contender.name.lower()).strip("-")
    local = dict(params)
    for index, step in enumerate(contender.prepare):
        run_step(step, local, data_dir, f"{slug}-{round_index}-prepare-{index}", f"prepare {contender.name}")
    output = Path(contender.writes.format(**local)) if contender.writes else None
    if output is not None and output.exists():
        output.unlink()
    # Sync even when the cache cannot be dropped, so the previous run's dirty
    # pages (and freed blocks) are not written back during this one.
    if cache_droppable:
        cold = drop_page_cache()
    else:
        os.sync()
        cold = False
    if cgroup is not None:
        (cgroup / "memory.max_usage_in_bytes").write_text("0")
    log_prefix = data_dir / f"{slug}-{round_index}"
    load_average_1m = os.getloadavg()[0]
    run = run_once(argv, data_dir, log_prefix, preexec)
    run["round"] = round_index
    run["load_average_1m"] = load_average_1m
    run["cache"] = "cold" if cold else "warm"
    if cgroup is not None:
        run["cgroup_peak_bytes"] = int((cgroup / "memory.max_usage_in_bytes").read_text())
    problem = None
    if run["exit_code"] not in contender.exit_codes:
        problem = f"failed with exit code {run['exit_code']}"
        if run["exit_code"] in (-9, 137) and cgroup is not None:
            problem += " (killed: out of memory in the cgroup?)"
    elif contender.expect_output:
        pattern = contender.expect_output.format(**local)
        printed = "".join(
            log_prefix.with_suffix(suffix).read_text(errors="replace") for suffix in (".stdout", ".stderr")
        )
        if not re.search(pattern, printed):
            problem = f"exited {run['exit_code']} without printing /{pattern}/"
    if problem:
        raise BenchmarkFailure(
            f"{contender.name} {problem} in round {round_index + 1}\n"
            f"command: {' '.join(argv)}\nstderr: {run['stderr_tail']}\nstdout: {run['stdout_tail']}"
        )
    if output is not None:
        size = output.stat().st_size if output.exists() else -1
        expected = int(local["bytes"])
        if contender.output_size_exact and size != expected:
            raise BenchmarkFailure(f"{contender.name} wrote {size} bytes to {output}, expected {expected}")
        if not contender.output_size_exact and size <= 0:
            raise BenchmarkFailure(f"{contender.name} wrote no output to {output}")
        run["output_bytes"] = size
    if contender.json_report:
        try:
            run["report"] = json.loads(log_prefix.with_suffix(".stdout").read_text())
        except (OSError, ValueError) as error:
            raise BenchmarkFailure(
                f"{contender.name} printed no JSON report in round {round_index + 1}: {error}\n"
                f"stdout: {run['stdout_tail']}"
            ) from error
    validation = []
    for index, step in enumerate(contender.validate):
        try:
            validation.append(
                run_step(step, local, data_dir, f"{slug}-{round_index}-validate-{index}", f"validate {contender.name}")
            )
        except BenchmarkFailure as failure:
            raise BenchmarkFailure(
                f"OUTPUT DID NOT VALIDATE: {contender.name}, round {round_index + 1}\n{failure}"
            ) from failure
    if validation:
        run["validation"] = validation
    for path in contender.cleanup:
        Path(path.format(**local)).unlink(missing_ok=True)
    return run


def print_header(
    workload: Workload,
    machine: dict[str, Any],
    spillway_meta: dict[str, Any] | None,
    plan: list[tuple[int, int]],
    cache: str,
    base_dir: Path,
    memory_limit_bytes: int | None,
) -> None:
    sizes = ", ".join(f"{format_bytes(size // RECORD_BYTES * RECORD_BYTES)} x {count} runs" for size, count in plan)
    variants = ", ".join(variant.name for variant in workload.variants)
    print(f"workload   {workload.name}: {sizes}" + (f"; variants {variants}" if variants else ""))
    print(
        f"machine    {machine['cpu_model']}, {machine['cpu_cores']} cores, "
        f"{format_bytes(machine['memory_bytes'])} RAM, kernel {machine['kernel']}"
    )
    print(
        f"disk       {machine['disk_device']} ({machine['disk_fstype']}, {machine['disk_mount_options']}), "
        f"{format_bytes(machine['disk_free_bytes'])} free; data under {base_dir}"
    )
    if spillway_meta:
        print(
            f"spillway   {spillway_meta['version']}, {spillway_meta['profile']} build, "
            f"repository at {spillway_meta['commit']}, {spillway_meta['path']} (modified {spillway_meta['binary_modified']})"
        )
    print(
        f"cache      {cache} ({'page cache dropped before every run' if cache == 'cold' else 'page cache NOT dropped'})"
    )
    if memory_limit_bytes:
        print(f"memory     every run in a cgroup v1 memory limit of {format_bytes(memory_limit_bytes)}")
    print(flush=True)


def progress_line(round_index: int, runs: int, name: str, run: dict[str, Any], data_bytes: int) -> str:
    read = run["read_bytes"] if run["read_bytes"] is not None else run["inblock_bytes"]
    written = run["write_bytes"] if run["write_bytes"] is not None else run["oublock_bytes"]
    cgroup = f"  cgroup peak {run['cgroup_peak_bytes'] / 2**20:.0f} MiB" if "cgroup_peak_bytes" in run else ""
    return (
        f"[{round_index + 1}/{runs}] {name:<20} {run['wall_s']:8.3f} s {run['throughput_mb_s']:9.1f} MB/s "
        f"RSS {run['peak_rss_kib'] / 1024:8.1f} MiB  read {read / data_bytes:5.2f}x  written {written / data_bytes:5.2f}x  "
        f"cpu {run['cpu_s']:.2f} s  ({run['cache']}){cgroup}"
    )


# ---------------------------------------------------------------------------
# Reports


def write_reports(report: dict[str, Any], out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    name = report["workload"]
    (out_dir / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    (out_dir / f"{name}.md").write_text(markdown_report(report))
    write_chart(report, out_dir / f"{name}.png")
    write_index(out_dir)
    print(f"\nwrote {out_dir / name}.json, .md, .png and {out_dir / 'README.md'}")


def parts_of(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The report's parts: its `parts` list, or the flat report itself as the only part."""
    return report["parts"] if "parts" in report else [report]


def throughput_scale(report: dict[str, Any]) -> tuple[str, float, int]:
    """(unit, factor from MB/s, digits) for the report's throughput unit."""
    if report.get("throughput_unit") == "GB/s":
        return "GB/s", 1e-3, 2
    return "MB/s", 1.0, 0


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def spread(summary: dict[str, float], scale: float = 1.0, digits: int = 1) -> str:
    return (
        f"{summary['median'] * scale:.{digits}f} "
        f"({summary['min'] * scale:.{digits}f}–{summary['max'] * scale:.{digits}f})"
    )


def ratio_sentences(report: dict[str, Any]) -> list[str]:
    """One plain sentence per comparison: the ratio, the target, CPU-boundness, noise."""
    unit, scale, digits = throughput_scale(report)
    summaries = {contender["name"]: contender["summary"] for contender in report["contenders"]}
    sentences = []
    for comparison in report["comparisons"]:
        ratio = comparison["ratio"]
        figures = (
            f"{comparison['contender_mb_s'] * scale:.{digits}f} vs {comparison['peer_mb_s'] * scale:.{digits}f} {unit}"
        )
        if ratio < 1:
            sentence = f"{comparison['contender']} reaches {ratio:.0%} of {comparison['peer']}'s throughput ({figures})"
            ours, theirs = summaries[comparison["contender"]], summaries[comparison["peer"]]
            sentence += (
                f"; it spends {ours['cpu_s']['median']:.2f} s of CPU in {ours['wall_s']['median']:.2f} s "
                f"(the peer {theirs['cpu_s']['median']:.2f} s in {theirs['wall_s']['median']:.2f} s)"
            )
        else:
            sentence = f"{comparison['contender']} is {ratio:.2f}x as fast as {comparison['peer']} ({figures})"
        target = comparison["target"]
        if target is not None:
            verdict = "meets" if comparison["meets_target"] else "misses"
            shown = f"{target:.0%}" if target < 1 else f"{target:g}x"
            sentence += f"; it {verdict} the target of {shown}"
        low, high = min(comparison["per_round_ratios"]), max(comparison["per_round_ratios"])
        if high > 1.2 * low:
            sentence += f"; the per-round ratios range from {low:.2f} to {high:.2f}, so the disk's noise is large here"
        bound = report.get("disk_bound")
        if target is not None and target > 1 and not comparison["meets_target"] and bound:
            if comparison["contender"] in bound["fractions"]:
                needed_s = summaries[comparison["peer"]]["wall_s"]["median"] / target
                floor_s = bound["floor_s"]
                sentence += (
                    f"; {target:g}x would take {needed_s:.2f} s, "
                    + (
                        f"less than the {floor_s:.2f} s the disk needs for a 2-IO sort here (see below), "
                        "so no 2-IO sort reaches it on this disk"
                        if needed_s < floor_s
                        else f"{floor_s / needed_s:.0%} of the disk's limit ({floor_s:.2f} s, see below)"
                    )
                )
        sentences.append(sentence + ".")
    for failure in report.get("failed", []):
        sentences.append(f"{failure['name']} failed, so it has no ratio: {failure['reason']}")
    bound = report.get("disk_bound")
    if bound:
        for name, verdict in bound["targets"].items():
            sentences.append(
                f"Out of memory, {name} reaches {verdict['fraction']:.0%} of the disk-bound limit "
                f"({bound['limit_s']:.1f} s); it {'meets' if verdict['met'] else 'misses'} the target of "
                f"{verdict['target']:.0%}."
            )
    return sentences


def no_ratio_target(target: float | None) -> str:
    """The target column of a comparison whose peer failed."""
    return "" if target is None else f">= {target:g} (no ratio: the peer failed)"


def target_text(target: float | None, met: bool | None) -> str:
    if target is None:
        return ""
    shown = f"{target:.2f}" if target < 1 else f"{target:g}"
    return f">= {shown} ({'met' if met else 'missed'})"


def part_tables(report: dict[str, Any], part: dict[str, Any]) -> list[str]:
    """The contender table, the comparison table and the disk-bound line of one part."""
    unit, scale, digits = throughput_scale(report)
    data_bytes = part["data_bytes"]
    bound = part.get("disk_bound")
    cgroup = report.get("memory_limit_bytes") is not None
    header = f"| contender | median time s (min–max) | {unit} (min–max) | CPU s | peak RSS MiB |"
    rule = "|---|---|---|---|---|"
    if cgroup:
        header += " cgroup peak MiB |"
        rule += "---|"
    header += " read / data | written / data |"
    rule += "---|---|"
    if bound:
        header += " of disk-bound limit |"
        rule += "---|"
    header += " Spillway / peer |"
    rule += "---|"
    lines = [header, rule]
    ratios: dict[str, list[str]] = {}
    for comparison in part["comparisons"]:
        ratios.setdefault(comparison["contender"], []).append(f"{comparison['ratio']:.2f} vs {comparison['peer']}")
    for contender in part["contenders"]:
        summary = contender["summary"]
        read = summary.get("read_bytes", {}).get("median")
        written = summary.get("write_bytes", {}).get("median")
        row = (
            f"| {contender['name']} | {spread(summary['wall_s'], digits=2)} "
            f"| {spread(summary['throughput_mb_s'], scale=scale, digits=digits)} "
            f"| {summary['cpu_s']['median']:.2f} | {summary['peak_rss_kib']['median'] / 1024:.1f} |"
        )
        if cgroup:
            peak = summary.get("cgroup_peak_bytes", {}).get("median")
            row += f" {'n/a' if peak is None else f'{peak / 2**20:.0f}'} |"
        row += (
            f" {'n/a' if read is None else f'{read / data_bytes:.2f}'} "
            f"| {'n/a' if written is None else f'{written / data_bytes:.2f}'} |"
        )
        if bound:
            fraction = bound["fractions"].get(contender["name"])
            row += f" {'' if fraction is None else f'{fraction:.0%}'} |"
        row += f" {'; '.join(ratios.get(contender['name'], []))} |"
        lines.append(row)
    lines += [
        "",
        f"| comparison | Spillway / peer (median {unit}) | per-round ratios | target |",
        "|---|---|---|---|",
    ]
    for comparison in part["comparisons"]:
        per_round = ", ".join(f"{value:.2f}" for value in comparison["per_round_ratios"])
        lines.append(
            f"| {comparison['label']}: {comparison['contender']} / {comparison['peer']} "
            f"| **{comparison['ratio']:.2f}** | {per_round} | {target_text(comparison['target'], comparison['meets_target'])} |"
        )
    for failure in part.get("failed", []):
        for comparison in failure["comparisons"]:
            lines.append(
                f"| {comparison['label']}: {comparison['contender']} / {comparison['peer']} "
                f"| {failure['name']} failed | | {no_ratio_target(comparison['target'])} |"
            )
    if part.get("failed"):
        lines.append("")
        lines += [f"{failure['name']} failed: {failure['reason']}" for failure in part["failed"]]
    if bound:
        mode = "fits" if bound["in_memory"] else "does not fit"
        lines += [
            "",
            (
                f"Disk-bound limit: the data {mode} in the {format_bytes(bound['memory_budget_bytes'])} budget, so a "
                f"2-IO sort reads and writes it {'once' if bound['passes'] == 1 else 'twice'}: "
                f"{bound['passes']} x {format_bytes(data_bytes)} at {bound['read_mb_s'] * scale:.{max(digits, 1)}f} {unit} "
                f"({bound['read_contender']}) + {bound['passes']} x {format_bytes(data_bytes)} at "
                f"{bound['write_mb_s'] * scale:.{max(digits, 1)}f} {unit} ({bound['write_contender']}) = "
                f"**{bound['limit_s']:.1f} s**."
            ),
        ]
        for name, verdict in bound["targets"].items():
            lines.append(
                f"{name} reaches **{verdict['fraction']:.0%}** of it (target {target_text(verdict['target'], verdict['met'])})."
            )
        overlapped = bound.get("overlapped")
        if overlapped:
            reached = "; ".join(f"{name} {fraction:.0%}" for name, fraction in overlapped["fractions"].items())
            lines += [
                "",
                (
                    f"Overlapped limit: each pass of a 2-IO sort reads and writes at once. The disk read and wrote "
                    f"{format_bytes(data_bytes)} each at the same time in {overlapped['limit_s'] / bound['passes']:.1f} s "
                    f"({overlapped['contender']}, {overlapped['mb_s'] * scale:.{max(digits, 1)}f} {unit} each way), so "
                    f"no 2-IO sort of this data takes less than {bound['passes']} x that = "
                    f"**{overlapped['limit_s']:.1f} s** here. Reached: {reached}."
                ),
            ]
    return lines


def median_run(contender: dict[str, Any]) -> dict[str, Any]:
    """The run with the median wall time (the lower middle one for an even count)."""
    ordered = sorted(contender["runs"], key=lambda run: run["wall_s"])
    return ordered[(len(ordered) - 1) // 2]


def stage_tables(part: dict[str, Any]) -> list[str]:
    """Spillway's pipeline report (phases of stages) of each JSON-reporting contender's median run."""
    lines: list[str] = []
    for contender in part["contenders"]:
        run = median_run(contender)
        pipeline = run.get("report")
        if not isinstance(pipeline, dict) or not pipeline.get("phases"):
            continue
        facts = []
        if "mode" in pipeline:
            facts.append(f"mode `{pipeline['mode']}`")
        if "partitions" in pipeline:
            facts.append(f"{pipeline['partitions']} partitions")
        if "elapsed" in pipeline:
            facts.append(f"{pipeline['elapsed']:.2f} s by its own clock")
        input_bytes = pipeline.get("input_bytes")
        if input_bytes and "device_read_bytes" in pipeline:
            facts.append(
                f"device read {pipeline['device_read_bytes'] / input_bytes:.2f} and written "
                f"{pipeline.get('device_write_bytes', 0) / input_bytes:.2f} x the input"
            )
        lines += [
            f"Where {contender['name']}'s time goes (its own report, median run: round {run['round'] + 1}, "
            f"{run['wall_s']:.2f} s; {', '.join(facts)}):",
            "",
        ]
        for phase in pipeline["phases"]:
            elapsed = phase.get("elapsed", 0.0)
            phase_bytes = phase.get("bytes_in", 0)
            rate = f", {phase_bytes / elapsed / MEGABYTE:.0f} MB/s" if elapsed else ""
            lines += [
                f"*{phase.get('name', 'phase')}*: {elapsed:.2f} s{rate}",
                "",
                "| stage | workers | MB in | MB out | busy s | blocked in s | blocked out s | blocked mem s | MB/s busy |",
                "|---|---|---|---|---|---|---|---|---|",
            ]
            rates = []
            for stage in phase.get("stages", []):
                busy = stage.get("busy", 0.0)
                workers = max(1, stage.get("workers", 1))
                # Like Spillway's own table: no rate for under a millisecond of work per worker.
                rates.append(
                    stage.get("bytes_in", 0) / (busy / workers) / MEGABYTE if busy / workers >= 1e-3 else float("inf")
                )
            slowest = rates.index(min(rates)) if rates and min(rates) != float("inf") else -1
            for index, (stage, stage_rate) in enumerate(zip(phase.get("stages", []), rates)):
                shown = "" if stage_rate == float("inf") else f"{stage_rate:.0f}"
                if index == slowest:
                    shown = f"**{shown}** (bottleneck)"
                lines.append(
                    f"| {stage.get('name')} | {stage.get('workers')} | {stage.get('bytes_in', 0) / MEGABYTE:.0f} "
                    f"| {stage.get('bytes_out', 0) / MEGABYTE:.0f} | {stage.get('busy', 0):.2f} "
                    f"| {stage.get('blocked_input', 0):.2f} | {stage.get('blocked_output', 0):.2f} "
                    f"| {stage.get('blocked_memory', 0):.2f} | {shown} |"
                )
            queues = phase.get("queues", [])
            if queues:
                lines += [
                    "",
                    "Queues: "
                    + "; ".join(f"{q.get('name')} capacity {q.get('capacity')}, max depth {q.get('depth_max')}" for q in queues)
                    + ".",
                ]
            lines.append("")
    return lines


def data_line(report: dict[str, Any], part: dict[str, Any], with_cache: bool) -> str:
    cache_text = (
        "page cache dropped before every run (cache-cold)"
        if report["cache"] == "cold"
        else "**page cache NOT dropped (cache-warm)**: the kernel did not allow it"
    )
    limit = report["memory_limit_bytes"]
    variant = part.get("variant")
    text = f"Data: {format_bytes(part['data_bytes'])} ({part['records']:,} records of 100 bytes)"
    if variant:
        text += f", {variant['description'] or variant['name']}"
    text += f". {plural(part['runs_per_contender'], 'run')} per contender, alternating between contenders"
    if with_cache:
        text += (
            f"; {cache_text}"
            + (f"; every run inside a cgroup v1 memory limit of {format_bytes(limit)}" if limit else "")
            + f". Times and throughputs are medians with (min–max); {throughput_scale(report)[0][:2]} = "
            + ("10^9" if throughput_scale(report)[0] == "GB/s" else "10^6")
            + " bytes"
        )
    return text + "."


def markdown_report(report: dict[str, Any]) -> str:
    machine = report["machine"]
    parts = parts_of(report)
    multi = "parts" in report
    lines = [
        f"# Benchmark: {report['workload']}",
        "",
        report["description"],
        "",
        (
            f"Measured {report['generated_at']} on {machine['cpu_model']}, {machine['cpu_cores']} cores, "
            f"{format_bytes(machine['memory_bytes'])} RAM, kernel {machine['kernel']}, "
            f"{machine['disk_fstype']} on {machine['disk_device']}."
        ),
    ]
    spillway_meta = report["spillway"]
    if spillway_meta:
        lines.append(
            f"Spillway: `{spillway_meta['version']}`, {spillway_meta['profile']} build (binary modified "
            f"{spillway_meta['binary_modified']}), repository at commit {spillway_meta['commit']}."
        )
        if spillway_meta["profile"] == "debug":
            lines.append("**WARNING: debug build; these numbers do not describe Spillway's speed.**")
    lines.append("")
    if multi:
        limit = report["memory_limit_bytes"]
        unit = throughput_scale(report)[0]
        lines.append(
            ("Page cache dropped before every run (cache-cold)" if report["cache"] == "cold"
             else "**Page cache NOT dropped (cache-warm)**: the kernel did not allow it")
            + (f"; every run inside a cgroup v1 memory limit of {format_bytes(limit)}" if limit else "")
            + f". Times and throughputs are medians with (min–max); {unit[:2]} = "
            + ("10^9" if unit == "GB/s" else "10^6")
            + " bytes."
            + (
                f" The whole benchmark took {report['benchmark_wall_s'] / 60:.1f} minutes."
                if report.get("benchmark_wall_s")
                else ""
            )
        )
    else:
        lines.append(data_line(report, report, with_cache=True))
    lines += ["", "Reproduce:", "", "```", report["reproduce"], "```", ""]
    if multi:
        lines += summary_table(report) + [""]
    for part in parts:
        if multi:
            lines += [f"## {part['label']}", "", data_line(report, part, with_cache=False), ""]
        lines += part_tables(report, part)
        lines += ["", "Where we stand:", ""] + [f"- {sentence}" for sentence in ratio_sentences({**report, **part})] + [""]
        lines += stage_tables(part)
    if report["notes"]:
        lines += ["## Method" if multi else "Method notes:", ""] + [f"- {note}" for note in report["notes"]] + [""]
    lines += ["Commands (`$DIR` is a scratch directory on the same disk, deleted afterwards):", ""]
    first = parts[0]
    for step in first.get("setup", []):
        command = " ".join(step["command"]).replace(first["data_dir"], "$DIR").replace(f"{REPO_ROOT}/", "")
        lines.append(f"- setup{'' if not first.get('variant') else ' (' + first['variant']['name'] + ')'}: `{command}`")
    for contender in first["contenders"]:
        command = " ".join(contender["command"]).replace(first["data_dir"], "$DIR")
        command = command.replace(f"{REPO_ROOT}/", "")
        lines.append(f"- {contender['name']}: `{command}`")
        run = contender["runs"][0] if contender["runs"] else {}
        for step in run.get("validation", []):
            check = " ".join(step["command"]).replace(first["data_dir"], "$DIR").replace(f"{REPO_ROOT}/", "")
            lines.append(f"  - then, untimed: `{check}`")
    lines += ["", f"![median throughput]({report['workload']}.png)", ""]
    return "\n".join(lines)


def summary_table(report: dict[str, Any]) -> list[str]:
    """Every part's comparisons (and disk-bound fractions) in one table."""
    unit, scale, digits = throughput_scale(report)
    names = [c["name"] for c in parts_of(report)[0]["contenders"]]
    bound_names = list((parts_of(report)[0].get("disk_bound") or {}).get("fractions", {}))
    lines = ["Summary (median of each part; Spillway / peer, higher is better):", ""]
    # Every comparison of any part: a peer that failed in one part has no
    # ratio there, but may have one in another.
    pairs: list[tuple[str, str]] = []
    for part in parts_of(report):
        for c in part["comparisons"]:
            if (c["contender"], c["peer"]) not in pairs:
                pairs.append((c["contender"], c["peer"]))
    header = "| data | " + " | ".join(f"{contender} / {peer}" for contender, peer in pairs) + " |"
    if bound_names:
        header += " " + " | ".join(f"{name}: of disk-bound limit" for name in bound_names[:1]) + " |"
    header += f" {names[0]} {unit} |"
    lines += [header, "|" + "---|" * (header.count("|") - 1)]
    for part in parts_of(report):
        by_pair = {(c["contender"], c["peer"]): c for c in part["comparisons"]}
        cells = [
            f"**{c['ratio']:.2f}**" + (f" ({'met' if c['meets_target'] else 'missed'} {c['target']:g}x)" if c["target"] else "")
            if (c := by_pair.get(pair)) else "failed"
            for pair in pairs
        ]
        bound = part.get("disk_bound")
        if bound_names and bound:
            name = bound_names[0]
            verdict = bound["targets"].get(name)
            fraction = f"{bound['fractions'][name]:.0%}"
            if verdict:
                fraction += f" ({'met' if verdict['met'] else 'missed'} {verdict['target']:.0%})"
            elif bound["in_memory"]:
                fraction += " (in memory)"
            cells.append(fraction)
        first = part["contenders"][0]["summary"]["throughput_mb_s"]["median"] * scale
        cells.append(f"{first:.{digits}f}")
        lines.append(f"| {part['label']} | " + " | ".join(cells) + " |")
    return lines


def write_chart(report: dict[str, Any], path: Path) -> None:
    pyplot = import_pyplot()
    unit, scale, digits = throughput_scale(report)
    parts = parts_of(report)
    columns = min(2, len(parts))
    rows = (len(parts) + columns - 1) // columns
    width = max(5.0, 1.2 * len(parts[0]["contenders"])) * columns
    figure, axes_grid = pyplot.subplots(rows, columns, figsize=(width, 4.0 * rows), squeeze=False)
    role_colors = {"spillway": "#1f77b4", "peer": "#999999"}
    for index, part in enumerate(parts):
        axes = axes_grid[index // columns][index % columns]
        contenders = part["contenders"]
        names = [contender["name"] for contender in contenders]
        medians = [contender["summary"]["throughput_mb_s"]["median"] * scale for contender in contenders]
        lows = [m - c["summary"]["throughput_mb_s"]["min"] * scale for m, c in zip(medians, contenders)]
        highs = [c["summary"]["throughput_mb_s"]["max"] * scale - m for m, c in zip(medians, contenders)]
        colors = [role_colors.get(contender["role"], "#999999") for contender in contenders]
        bars = axes.bar(names, medians, yerr=[lows, highs], capsize=6, color=colors)
        for bar, median in zip(bars, medians):
            axes.annotate(
                f"{median:.{digits}f}",
                (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                xytext=(0, 3),
                textcoords="offset points",
                ha="center",
                fontsize=8,
            )
        ratios = ", ".join(f"{c['contender']} / {c['peer']} = {c['ratio']:.2f}" for c in part["comparisons"])
        if len(ratios) > 70:
            ratios = "\n".join(f"{c['contender']} / {c['peer']} = {c['ratio']:.2f}" for c in part["comparisons"])
        axes.legend(
            handles=[pyplot.Rectangle((0, 0), 1, 1, color=color) for color in role_colors.values()],
            labels=["Spillway", "peer"],
            loc="best",
            fontsize=8,
        )
        axes.set_ylabel(f"{unit} (median, min–max bars)")
        what = part["label"] if "parts" in report else format_bytes(part["data_bytes"])
        axes.set_title(
            f"{report['workload']}: {what}, {plural(part['runs_per_contender'], 'run')}, cache {report['cache']}\n{ratios}",
            fontsize=8,
        )
        axes.tick_params(axis="x", labelsize=7, labelrotation=20)
    for index in range(len(parts), rows * columns):
        axes_grid[index // columns][index % columns].axis("off")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)


def write_index(out_dir: Path) -> None:
    """docs/benchmarks/README.md, regenerated from every <workload>.json present."""
    lines = [
        "# Benchmarks",
        "",
        (
            "Spillway against its peers on the same machine in the same run; the figure is the ratio of "
            "median throughputs (Spillway / peer, higher is better). Generated by `bench/run.py` "
            "(see `bench/README.md`); do not edit by hand."
        ),
        "",
        "| workload | headline | other ratios | data | cache | measured |",
        "|---|---|---|---|---|---|",
    ]
    # Reports of the benchmarks with drivers of their own (bench/agg.py, kv.py, stream.py):
    # their own tables, listed after the run.py workloads.
    others: list[str] = []
    for json_path in sorted(out_dir.glob("*.json")):
        try:
            report = json.loads(json_path.read_text())
            name = report["workload"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        try:
            parts = parts_of(report)
            for part in parts:
                part["comparisons"]
        except (KeyError, TypeError):
            if "date" in report:
                others.append(
                    f"- [{name}]({name}.md): `bench/{name}.py`, measured {report['date']} at commit "
                    f"{report.get('commit', 'unknown')}; its targets and ratios are in the page."
                )
            continue
        for part in parts:
            texts = [f"{c['contender']} / {c['peer']}: **{c['ratio']:.2f}**" for c in part["comparisons"]]
            bound = part.get("disk_bound")
            if bound:
                texts += [
                    f"{contender}: {fraction:.0%} of disk-bound limit"
                    for contender, fraction in list(bound["fractions"].items())[:1]
                ]
            headline = texts[0] if texts else ""
            data = part.get("label") if "parts" in report else format_bytes(part["data_bytes"])
            lines.append(
                f"| [{name}]({name}.md) | {headline} | {'; '.join(texts[1:])} | {data} "
                f"| {report['cache']} | {report['generated_at'][:10]} |"
            )
    if others:
        lines += ["", "Benchmarks with drivers of their own (see `bench/README.md`):", "", *others]
    (out_dir / "README.md").write_text("\n".join(lines) + "\n")


# ---------------------------------------------------------------------------
# Command line


def default_data_dir() -> Path:
    """$SPILLWAY_BENCH_DIR, else .bench-scratch next to the repository (same disk, outside git)."""
    from_env = os.environ.get("SPILLWAY_BENCH_DIR")
    return Path(from_env) if from_env else REPO_ROOT.parent / ".bench-scratch"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", nargs="?", help="workload name (see --list)")
    parser.add_argument("--list", action="store_true", help="list the workloads and exit")
    parser.add_argument(
        "--size",
        type=parse_size,
        action="append",
        help="data size (default 4G); repeat for several sizes, each a part of the report",
    )
    parser.add_argument(
        "--runs",
        type=int,
        action="append",
        help="runs per contender (default 3); once for every size, or once per --size in the same order",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=None,
        help="scratch data directory (default $SPILLWAY_BENCH_DIR or ../.bench-scratch)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT_DIR, help="report directory (default docs/benchmarks)")
    parser.add_argument("--spillway", default=None, help="spillway binary (default target/release/spillway)")
    parser.add_argument(
        "--memory-limit", type=parse_size, default=None, help="run every contender in a cgroup v1 memory limit"
    )
    parser.add_argument("--warm", action="store_true", help="do not drop the page cache between runs")
    args = parser.parse_args(argv)

    if args.list or not args.workload:
        for listed in WORKLOADS.values():
            print(f"{listed.name:<12} {listed.description}")
        return 0 if args.list else 2
    if args.workload not in WORKLOADS:
        print(f"unknown workload {args.workload!r}; known: {', '.join(WORKLOADS)}", file=sys.stderr)
        return 2
    sizes = args.size or [parse_size("4G")]
    runs = args.runs or [3]
    try:
        plan = size_plan(sizes, runs)
    except BenchmarkFailure as failure:
        print(f"error: {failure}", file=sys.stderr)
        return 2
    reproduce = " ".join(["python3", "bench/run.py", args.workload])
    if len(runs) == 1:
        reproduce += " " + " ".join(f"--size {format_size_arg(size)}" for size in sizes) + f" --runs {runs[0]}"
    else:
        reproduce += " " + " ".join(f"--size {format_size_arg(size)} --runs {count}" for size, count in plan)
    if args.memory_limit:
        reproduce += f" --memory-limit {format_size_arg(args.memory_limit)}"
    if args.warm:
        reproduce += " --warm"
    try:
        run_workload(
            WORKLOADS[args.workload],
            size_bytes=sizes,
            runs=runs,
            base_dir=args.dir or default_data_dir(),
            out_dir=args.out,
            spillway=args.spillway,
            memory_limit_bytes=args.memory_limit,
            drop_cache=not args.warm,
            reproduce=reproduce,
        )
    except BenchmarkFailure as failure:
        print(f"\nBENCHMARK FAILED: {failure}", file=sys.stderr)
        return 1
    return 0


def format_size_arg(size: int) -> str:
    for suffix, factor in (("T", 2**40), ("G", 2**30), ("M", 2**20), ("k", 2**10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{suffix}"
    return str(size)


if __name__ == "__main__":
    sys.exit(main())
