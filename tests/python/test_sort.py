"""gensort and valsort through the Python package and the pip-installed command."""

import errno
import os
import shutil
import subprocess
import sys
import zlib

import pytest

import spillway


def crc_sum(data: bytes) -> str:
    total = sum(zlib.crc32(data[i : i + 100]) for i in range(0, len(data), 100))
    return format(total, "x")


def test_gensort_matches_the_published_vectors(tmp_path):
    path = tmp_path / "binary.dat"
    report = spillway.gensort(path, 1000)
    assert report.checksum == "1ea6370b955"
    assert report.records == 1000 and report.bytes == 100_000
    data = path.read_bytes()
    assert data[:10] == b"JimGrayRIP"
    # The checksum is the sum of zlib CRC-32s, recomputed independently here.
    assert crc_sum(data) == "1ea6370b955"
    ascii_report = spillway.gensort(tmp_path / "ascii.dat", 1000, ascii=True)
    assert ascii_report.checksum == "1f5dfb3631a"
    assert (tmp_path / "ascii.dat").read_bytes()[:10] == b"AsfAGHM5om"


def test_offsets_concatenate(tmp_path):
    spillway.gensort(tmp_path / "whole", 500, skew=True, ascii=True)
    spillway.gensort(tmp_path / "head", 200, skew=True, ascii=True)
    spillway.gensort(tmp_path / "tail", 300, start=200, skew=True, ascii=True)
    joined = (tmp_path / "head").read_bytes() + (tmp_path / "tail").read_bytes()
    assert joined == (tmp_path / "whole").read_bytes()


def test_valsort_reports_order_duplicates_and_checksum(tmp_path):
    path = tmp_path / "input.dat"
    spillway.gensort(path, 2000)
    unsorted = spillway.valsort(path)
    assert not unsorted.sorted
    assert unsorted.unordered > 0 and unsorted.first_unordered is not None
    assert "ERROR - there are" in unsorted.report

    data = path.read_bytes()
    records = sorted(data[i : i + 100] for i in range(0, len(data), 100))
    records[5] = records[4][:10] + records[5][10:]  # plant one duplicate key
    sorted_path = tmp_path / "sorted.dat"
    sorted_path.write_bytes(b"".join(records))
    result = spillway.valsort(sorted_path, summary_file=tmp_path / "part.sum")
    assert result.sorted and result.duplicates == 1 and result.records == 2000
    assert result.checksum == crc_sum(b"".join(records))
    assert result.report.endswith("SUCCESS - all records are in order\n")
    assert (tmp_path / "part.sum").stat().st_size == 280
    combined = spillway.valsort(tmp_path / "part.sum", summaries=True)
    assert combined.checksum == result.checksum and combined.sorted


def test_bad_input_raises_the_matching_exception(tmp_path):
    partial = tmp_path / "partial.dat"
    partial.write_bytes(b"x" * 250)
    with pytest.raises(spillway.InvalidArgumentError, match="partial.dat.*250 bytes"):
        spillway.valsort(partial)
    with pytest.raises(ValueError):  # the built-in parent works too
        spillway.valsort(partial)
    with pytest.raises(spillway.SpillwayIOError) as missing:
        spillway.valsort(tmp_path / "missing.dat")
    assert missing.value.errno == errno.ENOENT
    assert isinstance(missing.value, OSError)
    with pytest.raises(spillway.SpillwayIOError, match="no-such-directory"):
        spillway.gensort(tmp_path / "no-such-directory" / "out.dat", 10)
    with pytest.raises(spillway.InvalidArgumentError, match="records"):
        spillway.gensort(tmp_path / "negative.dat", -1)


def spillway_command():
    # pip installs console scripts beside the interpreter it installs for.
    beside = os.path.join(os.path.dirname(sys.executable), "spillway")
    found = beside if os.path.exists(beside) else shutil.which("spillway")
    assert found, "pip install . must install the spillway command"
    return found


def test_the_installed_command_is_gensort_compatible(tmp_path):
    out = tmp_path / "cli.dat"
    run = subprocess.run(
        [spillway_command(), "gensort", "-c", "-b2000", "1000", str(out)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    library = spillway.gensort(tmp_path / "lib.dat", 1000, start=2000)
    assert run.stderr.strip() == library.checksum
    assert out.read_bytes() == (tmp_path / "lib.dat").read_bytes()

    check = subprocess.run([spillway_command(), "valsort", str(out)], capture_output=True, text=True)
    assert check.returncode == 1
    assert "unordered records" in check.stderr

    bad = subprocess.run([spillway_command(), "valsort", str(tmp_path / "missing")], capture_output=True, text=True)
    assert bad.returncode == 1 and "missing" in bad.stderr

    module = subprocess.run([sys.executable, "-m", "spillway", "--version"], capture_output=True, text=True)
    assert module.returncode == 0 and spillway.__version__ in module.stdout
    assert os.path.getsize(out) == 100_000


def test_sort_in_memory_and_in_two_passes(tmp_path):
    source = tmp_path / "input.dat"
    generated = spillway.gensort(source, 30_000, skew=True)
    for memory, mode, passes in [("64M", "in_memory", 1), (1 << 20, "two_pass", 2)]:
        out = tmp_path / f"sorted-{mode}.dat"
        report = spillway.sort(source, out, memory=memory, tmp=tmp_path / "tmp")
        assert report.mode == mode
        assert report.records == 30_000
        assert report.logical_read_bytes == passes * 3_000_000
        assert [phase["name"].split(":")[0] for phase in report.phases] == ["phase one", "phase two"]
        assert {stage["name"] for stage in report.phases[1]["stages"]} == {"reader", "sorter", "writer"}
        check = spillway.valsort(out)
        assert check.sorted and check.checksum == generated.checksum
    assert not list((tmp_path / "tmp").iterdir())  # intermediate files removed


def test_sort_errors_are_exceptions(tmp_path):
    bad = tmp_path / "bad.dat"
    bad.write_bytes(b"x" * 150)
    with pytest.raises(spillway.InvalidArgumentError, match="150 bytes"):
        spillway.sort(bad, tmp_path / "out.dat", memory="64M")
    assert not (tmp_path / "out.dat").exists()
    with pytest.raises(spillway.SpillwayIOError):
        spillway.sort(tmp_path / "missing.dat", tmp_path / "out.dat", memory="64M")


def test_sort_partitioned_output(tmp_path):
    source = tmp_path / "input.dat"
    generated = spillway.gensort(source, 20_000)
    report = spillway.sort(source, tmp_path / "out", memory=1 << 20, partitioned=True)
    assert len(report.output_files) > 1
    for path in report.output_files:
        assert spillway.valsort(path).sorted
    combined = spillway.valsort(tmp_path / "out" / "all.sum", summaries=True)
    assert combined.sorted and combined.checksum == generated.checksum and combined.records == 20_000


def test_sort_direct_io(tmp_path):
    source = tmp_path / "input.dat"
    generated = spillway.gensort(source, 12_345)
    spillway.sort(source, tmp_path / "out.dat", memory="1M", direct=True)
    check = spillway.valsort(tmp_path / "out.dat")
    assert check.sorted and check.checksum == generated.checksum


def _scratch(directory):
    return sorted(name for name in os.listdir(directory) if name.startswith("spillway-"))


def test_ctrl_c_stops_a_sort_and_leaves_nothing(tmp_path, ctrl_c):
    import time

    spillway.gensort(tmp_path / "input.dat", 2_000_000, sync=False)
    tmp = tmp_path / "tmp"
    signal = ctrl_c(ready=lambda: tmp.exists() and _scratch(tmp))
    with pytest.raises(KeyboardInterrupt):
        spillway.sort(tmp_path / "input.dat", tmp_path / "sorted.dat", memory="16M", tmp=tmp, sync=False)
        time.sleep(30)  # reached only if the sort ended before the signal
    latency = signal.latency()
    print(f"sort raised KeyboardInterrupt {latency:.3f} s after SIGINT")
    assert latency < 0.5, f"KeyboardInterrupt {latency:.3f} s after SIGINT"
    assert _scratch(tmp) == []
    assert sorted(os.listdir(tmp_path)) == ["input.dat", "tmp"]


def test_ctrl_c_stops_gensort_and_leaves_no_output(tmp_path, ctrl_c):
    import time

    signal = ctrl_c(ready=lambda: _scratch(tmp_path))
    with pytest.raises(KeyboardInterrupt):
        spillway.gensort(tmp_path / "big.dat", 50_000_000, sync=False)
        time.sleep(30)  # reached only if generation ended before the signal
    latency = signal.latency()
    print(f"gensort raised KeyboardInterrupt {latency:.3f} s after SIGINT")
    assert latency < 0.5, f"KeyboardInterrupt {latency:.3f} s after SIGINT"
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "call, parameter",
    [
        (lambda path: spillway.sort(path, path.with_name("out"), memory="abc"), "memory"),
        (lambda path: spillway.sort(path, path.with_name("out"), memory=-1), "memory"),
        (lambda path: spillway.sort(path, path.with_name("out"), threads=-2), "threads"),
        (lambda path: spillway.sort(path, path.with_name("out"), partitions=1.5), "partitions"),
        (lambda path: spillway.gensort(path.with_name("g"), -5), "records"),
        (lambda path: spillway.valsort(path, threads=-1), "threads"),
        (lambda path: spillway.sort(path, path.with_name("out"), threads=100_000), "threads"),
    ],
)
def test_bad_numbers_are_invalid_argument_errors_naming_the_parameter(tmp_path, call, parameter):
    path = tmp_path / "input.dat"
    spillway.gensort(path, 100)
    with pytest.raises(spillway.InvalidArgumentError) as raised:
        call(path)
    assert parameter in str(raised.value)
    assert sorted(os.listdir(tmp_path)) == ["input.dat"]


def test_the_package_declares_what_its_functions_need():
    from importlib.metadata import requires

    requirements = requires("spillway") or []
    plain = [r for r in requirements if "extra ==" not in r]
    assert any(r.startswith("numpy") for r in plain), requirements
    assert any(r.startswith("pyarrow") and "extra" in r and "arrow" in r.split("extra")[1] for r in requirements), (
        requirements
    )
