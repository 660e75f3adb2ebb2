"""What a benchmark needs before it runs: peers from their registries, drivers built, the binary under test.

Peers are installed from package registries on first use (`apt-get`, `pip`,
`cargo install`), as each contender declares; nothing is vendored. Drivers are
built as the workload declares (`CargoBuild`, `CxxBuild`): the ones that link
RocksDB compile it from source, a long C++ build, once, into a target directory
outside the repository that every driver shares.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from glob import glob
from pathlib import Path
from typing import Any

from declarations import CargoBuild, CxxBuild, Requirement
from measure import REPO_ROOT, BenchmarkFailure, command_output, file_modified, source_info

# The harness itself needs GNU time (Debian package "time") to measure peak RSS.
HARNESS_REQUIREMENTS = [Requirement(executable="/usr/bin/time", source="apt", package="time")]
GXX = Requirement(executable="g++", source="apt", package="g++")
# Outside the repository: RocksDB's build is about 1 GB of objects.
DEFAULT_DRIVER_TARGET_DIR = Path(os.environ.get("SPILLWAY_BENCH_TARGET", "/tmp/spillway-bench-target"))

# RocksDB's own build (CMake) finds sched_getcpu and, with its default
# PORTABLE=0, compiles for the host's SSE4.2 and carry-less multiply; the
# `rocksdb` crate's build script does neither. Without
# ROCKSDB_SCHED_GETCPU_PRESENT every per-core counter (statistics, the
# memtable's arena) asks for the core id with CPUID, which traps to the
# hypervisor on a virtual machine: about 60 us per put, 30x slower writes.
ROCKSDB_CXXFLAGS = "-DROCKSDB_SCHED_GETCPU_PRESENT -DHAVE_SSE42 -msse4.2 -DHAVE_PCLMUL -mpclmul"


# ---------------------------------------------------------------------------
# Requirements


def requirement_present(requirement: Requirement) -> bool:
    """The executable is on PATH, the module (if any) imports in this interpreter, the path (if any) exists."""
    if requirement.executable and not shutil.which(requirement.executable):
        return False
    if requirement.path and not Path(requirement.path).exists():
        return False
    if requirement.module:
        try:
            return importlib.util.find_spec(requirement.module) is not None
        except (ImportError, ValueError):
            return False
    return bool(requirement.executable or requirement.path)


def ensure_requirements(requirements: list[Requirement]) -> None:
    """Install missing peers from their registries (apt-get, pip, cargo install)."""
    for requirement in requirements:
        if requirement_present(requirement):
            continue
        needed = requirement.executable or requirement.path or f"Python module {requirement.module}"
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
    llvm_libs = [Path(path).name for path in glob("/usr/lib/llvm-*/lib/libclang*.so*")]
    if libclang.search(listing) or any(libclang.search(name) for name in llvm_libs):
        return
    print("installing libclang-dev (apt) for RocksDB's bindgen", flush=True)
    if not apt_install("libclang-dev"):
        raise BenchmarkFailure("could not install libclang-dev (needed to build RocksDB)")


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
# The binary under test


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


def build_profile(path: Path) -> str:
    resolved = str(path.resolve())
    if "/target/debug/" in resolved:
        return "debug"
    if "/release/" in resolved:
        return "release"
    return "unknown (not in a cargo target directory)"


def spillway_info(path: Path) -> dict[str, Any]:
    resolved = str(path.resolve())
    return {
        "path": resolved,
        "version": command_output([resolved, "--version"]) or "unknown",
        "profile": build_profile(path),
        "commit": source_info()["described"],
        "binary_modified": file_modified(path),
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


# ---------------------------------------------------------------------------
# Drivers


def build(spec: CargoBuild | CxxBuild, target_dir: Path, features: set[str]) -> dict[str, Any]:
    """Builds one driver (`features`: the optional cargo features the selected contenders need).

    Returns what the report says about it: the command, its path, the time the
    build took and the toolchain.
    """
    ensure_requirements(spec.requires)
    target_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    if isinstance(spec, CargoBuild):
        info = cargo_build(spec, target_dir, features)
    else:
        info = cxx_build(spec, target_dir)
    binary = Path(info["path"])
    if not binary.exists():
        raise BenchmarkFailure(f"the build of {spec.name} made no {binary}")
    info.update(name=spec.name, build_s=round(time.perf_counter() - started, 1), binary_modified=file_modified(binary))
    info.setdefault("profile", build_profile(binary))
    return info


def cargo_build(spec: CargoBuild, target_dir: Path, features: set[str]) -> dict[str, Any]:
    environment = dict(os.environ)
    command = ["nice", "cargo", "build", "--release", "--locked"]
    if spec.manifest:
        command += ["--manifest-path", str(REPO_ROOT / spec.manifest)]
        environment["CARGO_TARGET_DIR"] = str(target_dir)
        path = target_dir / "release" / spec.binary
    else:
        command += ["-p", spec.package or spec.binary]
        environment.pop("CARGO_TARGET_DIR", None)
        path = REPO_ROOT / "target" / "release" / spec.binary
    enabled = sorted(set(spec.optional_features) & features)
    if spec.optional_features:
        command.append("--no-default-features")
        if enabled:
            command += ["--features", ",".join(enabled)]
    if spec.rocksdb:
        # Always the same flags, with or without RocksDB: the `cc` crate's
        # build scripts rerun (and RocksDB compiles again) when they change.
        environment["CXXFLAGS"] = ROCKSDB_CXXFLAGS
        if "rocksdb" in enabled or not spec.optional_features:
            ensure_requirements([GXX])
            ensure_libclang()
    shown_environment = [f"CXXFLAGS='{ROCKSDB_CXXFLAGS}'"] if spec.rocksdb else []
    if spec.manifest:
        shown_environment.insert(0, f"CARGO_TARGET_DIR={target_dir}")
    shown = " ".join(shown_environment + command).replace(f"{REPO_ROOT}/", "")
    print(f"building {spec.name}: {shown}", flush=True)
    if subprocess.run(command, cwd=REPO_ROOT, env=environment, check=False).returncode != 0:
        raise BenchmarkFailure(f"cargo build of {spec.name} failed: {shown}")
    return {"command": shown, "path": str(path), "toolchain": command_output(["rustc", "--version"])}


def cxx_build(spec: CxxBuild, target_dir: Path) -> dict[str, Any]:
    ensure_requirements([GXX])
    path = target_dir / spec.name
    command = ["g++", *spec.flags, "-o", str(path), str(REPO_ROOT / spec.source), *spec.libraries]
    shown = " ".join(command).replace(f"{REPO_ROOT}/", "")
    print(f"building {spec.name}: {shown}", flush=True)
    if subprocess.run(command, check=False).returncode != 0:
        raise BenchmarkFailure(f"g++ of {spec.source} failed: {shown}")
    version = command_output(["g++", "--version"]).splitlines()
    return {
        "command": shown,
        "path": str(path),
        "profile": " ".join(flag for flag in spec.flags if flag.startswith("-O")) or "g++ default",
        "toolchain": version[0] if version else "g++",
    }
