"""Workload generators through the Python package."""

import collections

import pytest

import spillway
from spillway import workload


def test_text_is_deterministic_and_zipf_shaped(tmp_path):
    first = workload.text(tmp_path / "a.txt", bytes="256K", vocabulary=1000, zipf_s=1.0, seed=7)
    second = workload.text(tmp_path / "b.txt", bytes="256K", vocabulary=1000, zipf_s=1.0, seed=7)
    assert (tmp_path / "a.txt").read_bytes() == (tmp_path / "b.txt").read_bytes()
    assert first["bytes"] == (tmp_path / "a.txt").stat().st_size >= 256 * 1024
    words = (tmp_path / "a.txt").read_text().split()
    counts = collections.Counter(words).most_common(2)
    assert 1.6 < counts[0][1] / counts[1][1] < 2.5  # rank 1 / rank 2 is about 2^s
    other = workload.text(tmp_path / "c.txt", bytes="256K", vocabulary=1000, seed=8)
    assert other["bytes"] == (tmp_path / "c.txt").stat().st_size
    assert (tmp_path / "c.txt").read_bytes() != (tmp_path / "a.txt").read_bytes()


def test_kv_rmat_and_clicks_report_their_truths(tmp_path):
    ops = workload.kv(tmp_path / "ops.txt", preset="readwhilewriting", ops=2000, keys=100, seed=1)
    lines = (tmp_path / "ops.txt").read_text().splitlines()
    assert len(lines) == ops["records"] == 2000
    kinds = collections.Counter(line.split("\t")[0] for line in lines)
    assert set(kinds) == {"GET", "PUT"}
    assert ops["distinct_keys"] <= 100

    graph = workload.rmat(tmp_path / "g.bin", scale=10, edge_factor=8, binary=True)
    assert graph["bytes"] == 16 * graph["records"] == 16 * 8 * 1024

    # Sessions of about 8 clicks 20 s apart, a new one every 20 s over 50
    # users, a 2-minute timeout: users have many sessions, sessions many clicks.
    timeout_ms = 120_000
    log = workload.clicks(
        tmp_path / "clicks.tsv",
        users=50,
        clicks=5000,
        session_timeout_ms=timeout_ms,
        arrival_gap_ms=20_000,
    )
    rows = [line.split("\t") for line in (tmp_path / "clicks.tsv").read_text().splitlines()]
    assert len(rows) == log["records"] == 5000
    timestamps = [int(row[1]) for row in rows]
    assert timestamps == sorted(timestamps)
    # An independent sessionization: per user, in time order, a click more
    # than the timeout after the previous one (or the first) starts a session.
    clicks_by_user = collections.defaultdict(list)
    for user, timestamp, _url in rows:
        clicks_by_user[int(user)].append(int(timestamp))
    sessions = 0
    for times in clicks_by_user.values():
        times.sort()
        sessions += 1 + sum(1 for before, after in zip(times, times[1:]) if after - before > timeout_ms)
    assert log["sessions"] == sessions
    assert log["distinct_users"] == len(clicks_by_user)
    assert len(clicks_by_user) < sessions < len(rows)


def test_bad_options_raise_with_the_flag_named(tmp_path):
    with pytest.raises(spillway.InvalidArgumentError, match="zipf_s"):
        workload.text(tmp_path / "x.txt", bytes="1K", zipf_s=-1)
    with pytest.raises(spillway.InvalidArgumentError, match="no_such_option"):
        workload.rmat(tmp_path / "x.bin", no_such_option=3)
    with pytest.raises(spillway.SpillwayIOError):
        workload.clicks(tmp_path / "missing-dir" / "x.tsv", users=5, clicks=10)
    with pytest.raises(ValueError):
        workload.text("-", bytes="1K")


def test_a_misspelled_option_names_it_and_the_options_taken(tmp_path):
    with pytest.raises(spillway.InvalidArgumentError) as raised:
        workload.text(tmp_path / "x.txt", bytez=5)
    message = str(raised.value)
    assert "bytez" in message and "did you mean \"bytes\"" in message, message
    assert "vocabulary" in message and "zipf_s" in message, message
    assert "Usage" not in message and "--" not in message, message
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_stops_a_generator_and_leaves_no_output(tmp_path, ctrl_c):
    import time

    signal = ctrl_c(after=0.3)
    with pytest.raises(KeyboardInterrupt):
        workload.text(tmp_path / "big.txt", bytes="20G", threads=1)
        time.sleep(30)  # reached only if generation ended before the signal
    latency = signal.latency()
    print(f"text() raised KeyboardInterrupt {latency:.3f} s after SIGINT")
    assert latency < 0.5, f"KeyboardInterrupt {latency:.3f} s after SIGINT"
    assert list(tmp_path.iterdir()) == []
