"""spillway.StreamIndex: writes and queries against a Python model, aggregates, reopening,
compaction, bad input, statistics, corruption and repair, Ctrl-C, and the key encodings."""

import json
import math
import os
import random
import signal
import struct
import threading
import time
from pathlib import Path

import numpy
import pyarrow
import pytest

import spillway
from spillway import stream_key


class Model:
    """The index's contract in plain Python: records in arrival order, newest wins per (key, time)."""

    def __init__(self):
        self.records = []  # (key, time, seq, value)
        self.seq = 0

    def append(self, key, time, value):
        self.records.append((key, time, self.seq, value))
        self.seq += 1

    def update(self, key, time, value):
        self.delete(key, time)
        self.append(key, time, value)

    def delete(self, key, time):
        self.records = [record for record in self.records if (record[0], record[1]) != (key, time)]
        self.seq += 1

    def range(self, key_low, key_high, time_low=0, time_high=2**64 - 1):
        return sorted(
            record
            for record in self.records
            if key_low <= record[0] <= key_high and time_low <= record[1] <= time_high
        )


def pack(number):
    return struct.pack("<d", number)


def assert_same(found, expected):
    assert found["keys"].dtype == numpy.uint64 and found["times"].dtype == numpy.uint64
    assert found["keys"].tolist() == [record[0] for record in expected]
    assert found["times"].tolist() == [record[1] for record in expected]
    assert found["values"] == [record[3] for record in expected]


@pytest.mark.parametrize("template", ["none", "fixed", "rebuild"])
def test_writes_and_ranges_match_a_model(tmp_path, template):
    rng = random.Random(template)
    model = Model()
    index = spillway.StreamIndex(tmp_path / "index", buffer_bytes="64K", template=template, sync=False)
    time = 0
    for round_number in range(12):
        count = rng.randrange(200, 1500)
        keys = numpy.array([rng.randrange(2_000) for _ in range(count)], dtype=numpy.uint64)
        times = numpy.array([time + rng.randrange(50) for _ in range(count)], dtype=numpy.uint64)
        values = numpy.array([rng.uniform(-100, 100) for _ in range(count)])
        time += 40
        index.append_batch(keys, times, values)
        for key, at, value in zip(keys.tolist(), times.tolist(), values.tolist()):
            model.append(key, at, pack(value))
        # Single writes, some of them replacing records already in segments.
        for _ in range(30):
            key, at, value = rng.choice(model.records)[0], rng.randrange(time), rng.random()
            choice = rng.random()
            if choice < 0.3:
                index.append(key, at, b"text %d" % round_number)
                model.append(key, at, b"text %d" % round_number)
            elif choice < 0.6:
                old = rng.choice(model.records)
                index.update(old[0], old[1], value)
                model.update(old[0], old[1], pack(value))
            else:
                old = rng.choice(model.records)
                index.delete(old[0], old[1])
                model.delete(old[0], old[1])
    index.settle()
    assert index.stats()["segments"] >= 3, "the test should cross several flushed segments"
    assert_same(index.range(0, 2**64 - 1), model.range(0, 2**64 - 1))
    for _ in range(40):
        low = rng.randrange(2_100)
        high = low + rng.randrange(300)
        if rng.random() < 0.5:
            assert_same(index.range(low, high), model.range(low, high))
        else:
            time_low = rng.randrange(time)
            time_high = time_low + rng.randrange(200)
            assert_same(index.range(low, high, time_low, time_high), model.range(low, high, time_low, time_high))
    key = model.records[0][0]
    assert_same(index.get(key), model.range(key, key))
    assert_same(index.range(5, 4), [])
    index.close()


def test_float_values_come_back_as_an_array_and_other_values_are_named(tmp_path):
    with spillway.StreamIndex(tmp_path, sync=False) as index:
        index.append_batch([1, 2, 3], [10, 20, 30], [1.5, -2.0, 4])
        found = index.range(0, 10, values="float")
        assert found["values"].dtype == numpy.float64
        assert found["values"].tolist() == [1.5, -2.0, 4.0]
        found["values"][0] = 9.0  # the arrays are the caller's to change
        index.append(2, 25, b"seven b")
        with pytest.raises(spillway.InvalidArgumentError, match=r"key 2, time 25\) has a 7-byte value"):
            index.range(0, 10, values="float")
        with pytest.raises(ValueError, match="values must be 'bytes' or 'float'"):
            index.range(0, 10, values="str")


def test_aggregates_equal_numpy_over_the_same_records(tmp_path):
    rng = numpy.random.default_rng(3)
    count = 40_000
    keys = rng.integers(0, 10_000, count, dtype=numpy.uint64)
    times = numpy.arange(count, dtype=numpy.uint64) + rng.integers(0, 30, count, dtype=numpy.uint64)
    values = rng.normal(50, 20, count)
    with spillway.StreamIndex(tmp_path, buffer_bytes="256K", sync=False) as index:
        for part in numpy.array_split(numpy.arange(count), 7):
            index.append_batch(keys[part], times[part], values[part])
        index.append(5_000, 5, b"not a number")  # counted, but not summed
        for low, high, time_low, time_high in [
            (0, 2**64 - 1, None, None),
            (1_000, 1_999, None, None),
            (0, 9_999, 10_000, 20_000),
            (4_000, 6_000, 0, 100),
            (20_000, 30_000, None, None),
        ]:
            selected = (keys >= low) & (keys <= high)
            if time_low is not None:
                selected &= (times >= time_low) & (times <= time_high)
            aggregate = index.aggregate(low, high, time_low, time_high)
            text = int(low <= 5_000 <= high and (time_low is None or time_low <= 5 <= time_high))
            assert list(aggregate) == ["count", "numeric", "sum", "min", "max"]
            assert aggregate["count"] == int(selected.sum()) + text
            assert aggregate["numeric"] == int(selected.sum())
            if selected.any():
                assert aggregate["sum"] == pytest.approx(values[selected].sum(), rel=1e-9)
                assert aggregate["min"] == values[selected].min()
                assert aggregate["max"] == values[selected].max()
            else:
                assert aggregate["sum"] == 0 and aggregate["min"] is None and aggregate["max"] is None
        assert index.stats()["leaves_summarized"] > 0, "whole leaves answer from their summaries"


def test_reopening_keeps_the_data_closed_or_not(tmp_path):
    path = str(tmp_path / "index")
    index = spillway.StreamIndex(path, buffer_bytes="64K")
    index.append_batch(numpy.arange(5_000, dtype=numpy.uint64), numpy.arange(5_000, dtype=numpy.int64), numpy.ones(5_000))
    index.delete(17, 17)
    index.close()
    assert index.closed
    index.close()  # a second close does nothing
    with pytest.raises(spillway.InvalidArgumentError, match="is closed"):
        index.append(1, 1, b"x")
    with pytest.raises(spillway.InvalidArgumentError, match="is closed"):
        index.range(0, 10)
    assert "closed" in repr(index)

    index = spillway.StreamIndex(path, buffer_bytes="64K")
    assert index.aggregate(0, 2**64 - 1)["count"] == 4_999
    index.append(6_000, 6_000, b"unflushed")  # in the log only
    del index  # no close: the next open replays the log
    with spillway.StreamIndex(path, buffer_bytes="64K") as index:
        assert index.get(6_000)["values"] == [b"unflushed"]
        assert index.get(17)["values"] == []
        assert index.aggregate(0, 2**64 - 1)["count"] == 5_000


def test_a_read_only_index_answers_queries_and_keeps_writers_out(tmp_path):
    path = tmp_path / "index"
    with pytest.raises(spillway.InvalidArgumentError, match="holds no stream index"):
        spillway.StreamIndex(str(path), read_only=True)
    writer = spillway.StreamIndex(str(path), buffer_bytes="64K")
    writer.append_batch([1, 2, 3], [10, 20, 30], numpy.array([1.0, 2.0, 3.0]))
    with pytest.raises(spillway.InvalidArgumentError, match="open in another process"):
        spillway.StreamIndex(str(path), read_only=True)
    del writer  # no close: the records are only in the log
    before = sorted(p.name for p in path.iterdir())
    with spillway.StreamIndex(str(path), read_only=True) as reader:
        assert reader.aggregate(0, 10)["sum"] == 6.0
        with pytest.raises(spillway.InvalidArgumentError, match="read-only"):
            reader.append(4, 40, 4.0)
        with spillway.StreamIndex(str(path), read_only=True) as second:
            assert list(second.range(0, 10)["keys"]) == [1, 2, 3]
    assert sorted(p.name for p in path.iterdir()) == before


def test_flush_and_compact_merge_small_segments(tmp_path):
    with spillway.StreamIndex(tmp_path, buffer_bytes="1M", sync=False) as index:
        for part in range(6):
            keys = numpy.arange(part, 3_000, 6, dtype=numpy.uint64)
            index.append_batch(keys, keys, keys.astype(numpy.float64))
            index.flush()
        index.flush()  # an empty buffer is not a segment
        index.delete(0, 0)
        index.update(1, 1, 100.0)
        index.flush()
        before = index.stats()
        assert before["segments"] == 7 and before["flushes"] == 7
        merged = index.compact()
        after = index.stats()
        assert merged == 7 and after["segments"] == 1
        assert after["compactions"] >= 1 and after["compacted_segments"] == 7
        assert after["segment_records"] == 2_999, "the delete's and the update's old records are gone"
        found = index.range(0, 5, values="float")
        assert found["keys"].tolist() == [1, 2, 3, 4, 5]
        assert found["values"].tolist() == [100.0, 2.0, 3.0, 4.0, 5.0]
        assert index.verify()["records"] == 2_999


def test_bad_input_is_refused_with_errors_that_name_it(tmp_path):
    with pytest.raises(ValueError, match="NaN"):
        stream_key.f64(float("nan"))
    with pytest.raises(ValueError, match="element 1 is NaN"):
        stream_key.f64(numpy.array([1.0, numpy.nan]))
    with pytest.raises(TypeError, match="no option 'buffer_size'"):
        spillway.StreamIndex(tmp_path / "a", buffer_size=1 << 20)
    with pytest.raises(spillway.InvalidArgumentError, match="template must be"):
        spillway.StreamIndex(tmp_path / "a", template="grown")
    with pytest.raises(spillway.InvalidArgumentError, match="rebuild_threshold applies only"):
        spillway.StreamIndex(tmp_path / "a", template="fixed", rebuild_threshold=0.1)
    with pytest.raises(spillway.InvalidArgumentError, match="buffer_bytes must be at least 4096"):
        spillway.StreamIndex(tmp_path / "a", buffer_bytes=100)
    with pytest.raises(spillway.InvalidArgumentError, match="sync must be True or False"):
        spillway.StreamIndex(tmp_path / "a", sync="yes")
    with pytest.raises(spillway.InvalidArgumentError, match="fill must be"):
        spillway.StreamIndex(tmp_path / "a", fill=1.5)

    with spillway.StreamIndex(tmp_path / "b", ordered_time=True, value_bytes_max=16, sync=False) as index:
        index.append_batch([1, 2], [100, 200], [1.0, 2.0])
        with pytest.raises(spillway.InvalidArgumentError, match="record 2 .*time 150, before the time 300 of record 1"):
            index.append_batch([3, 4, 5], [250, 300, 150], [1.0, 2.0, 3.0])
        with pytest.raises(spillway.InvalidArgumentError, match="before the stream's latest time 200"):
            index.append(6, 199, 1.0)
        with pytest.raises(spillway.InvalidArgumentError, match="record 1 .*17 bytes, over the limit of 16"):
            index.append_batch([7, 8], [300, 301], [b"short", b"x" * 17])
        with pytest.raises(spillway.InvalidArgumentError, match="value_bytes_max"):
            index.append(9, 400, b"y" * 17)
        assert index.aggregate(0, 100)["count"] == 2, "a refused batch writes nothing"

        with pytest.raises(spillway.InvalidArgumentError, match="keys must be a uint64 .* not float64"):
            index.append_batch(numpy.array([1.0]), [1_000], [1.0])
        with pytest.raises(spillway.InvalidArgumentError, match=r"keys\[1\] is -5"):
            index.append_batch(numpy.array([1, -5]), [1_000, 1_001], [1.0, 2.0])
        with pytest.raises(spillway.InvalidArgumentError, match=r"times\[0\] must be a whole number"):
            index.append_batch([1], ["soon"], [1.0])
        with pytest.raises(spillway.InvalidArgumentError, match="2 keys, 2 times and 1 values"):
            index.append_batch([1, 2], [1_000, 1_001], numpy.array([1.0]))
        with pytest.raises(spillway.InvalidArgumentError, match="values must be a float64 array"):
            index.append_batch([1], [1_000], numpy.array(["a"]))
        with pytest.raises(spillway.InvalidArgumentError, match=r"values\[1\] must be bytes or a number, not str"):
            index.append_batch([1, 2], [1_000, 1_001], [b"a", "b"])
        with pytest.raises(spillway.InvalidArgumentError, match="key must be a whole number from 0 to 18446744073709551615, not 18446744073709551616"):
            index.append(2**64, 1_000, b"")
        with pytest.raises(spillway.InvalidArgumentError, match="time must be a whole number"):
            index.append(1, 1.5, b"")
        assert index.aggregate(0, 2**64 - 1)["count"] == 2


def test_columns_come_as_numpy_arrow_or_lists(tmp_path):
    with spillway.StreamIndex(tmp_path, sync=False) as index:
        index.append_batch(
            pyarrow.array([1, 2], type=pyarrow.uint64()),
            pyarrow.array([5, 6], type=pyarrow.int64()),
            pyarrow.array([b"arrow", b""], type=pyarrow.binary()),
        )
        index.append_batch(pyarrow.array([3]), pyarrow.array([7]), pyarrow.array([2.5]))
        index.append_batch(numpy.array([4, 4], dtype=numpy.uint32), [8, 9], [bytearray(b"ba"), 3])
        index.append_batch(numpy.array([2**64 - 1], dtype=numpy.uint64), [9], numpy.array([7], dtype=numpy.int32))
        index.append_batch([], [], [])
        found = index.range(0, 2**64 - 1)
        assert found["keys"].tolist() == [1, 2, 3, 4, 4, 2**64 - 1]
        assert found["values"] == [b"arrow", b"", pack(2.5), b"ba", pack(3), pack(7)]


def test_writers_on_several_threads(tmp_path):
    with spillway.StreamIndex(tmp_path, buffer_bytes="256K", sync=False) as index:

        def write(thread):
            for part in range(20):
                keys = numpy.full(500, thread, dtype=numpy.uint64)
                times = numpy.arange(part * 500, (part + 1) * 500, dtype=numpy.uint64)
                index.append_batch(keys, times, numpy.ones(500))

        threads = [threading.Thread(target=write, args=(number,)) for number in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert index.aggregate(0, 3)["sum"] == 40_000
        assert index.range(2, 2)["times"].tolist() == list(range(10_000))


def test_stats_name_every_counter(tmp_path):
    with spillway.StreamIndex(tmp_path, buffer_bytes="64K", template="fixed", sync=False) as index:
        index.append_batch(numpy.arange(10_000, dtype=numpy.uint64), numpy.arange(10_000, dtype=numpy.uint64), numpy.ones(10_000))
        index.range(100, 200)
        index.settle()
        stats = index.stats()
    overflow_fields = {"leaves", "overflowed", "overflowed_leaves", "overflowed_share", "entries", "overflow_entries"}
    assert set(stats) == {
        "writes", "next_seq", "buffer_records", "buffer_bytes", "segments", "segment_records", "segment_bytes",
        "flushes", "flush_pause_seconds", "templates", "template_leaves", "last_overflow", "total_overflow",
        "compactions", "compacted_segments", "tiers", "tier_merges", "tier_records", "cache_bytes",
        "leaves_summarized", "leaves_read", "unaccounted_files", "damaged_segments",
    }  # fmt: skip
    assert set(stats["last_overflow"]) == overflow_fields and set(stats["total_overflow"]) == overflow_fields
    assert stats["writes"] == stats["next_seq"] == 10_000
    assert stats["segment_records"] + stats["buffer_records"] == 10_000
    assert stats["segments"] == stats["flushes"] >= 2
    assert stats["segment_bytes"] > 10_000 * 8
    assert stats["templates"] == 1, "a fixed template is made once, from the first buffer"
    assert stats["template_leaves"] > 0 and stats["leaves_read"] > 0
    assert len(stats["total_overflow"]["overflowed"]) == 3
    assert 0 <= stats["total_overflow"]["overflowed_share"] <= 1
    assert stats["flush_pause_seconds"] >= 0


def test_verify_names_a_corrupted_segment(tmp_path):
    path = tmp_path / "index"
    with spillway.StreamIndex(path, sync=False) as index:
        index.append_batch(numpy.arange(2_000, dtype=numpy.uint64), numpy.arange(2_000, dtype=numpy.uint64), numpy.ones(2_000))
        assert index.verify()["records"] == 0, "verify checks segment files; the records are still in the buffer"
        index.flush()
        assert index.verify()["records"] == 2_000
    segment = sorted(Path(path).glob("*.seg"))[0]
    data = bytearray(segment.read_bytes())
    data[10] ^= 0x40  # inside the first leaf: the footer and the meta block stay whole
    segment.write_bytes(bytes(data))
    with spillway.StreamIndex(path, sync=False) as index:
        with pytest.raises(spillway.CorruptionError, match=segment.name):
            index.verify()


def test_key_encodings_keep_order():
    integers = [-(2**63), -5, -1, 0, 1, 7, 2**63 - 1]
    keys = [stream_key.i64(number) for number in integers]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert [stream_key.decode_i64(key) for key in keys] == integers
    assert stream_key.i64(numpy.array(integers)).tolist() == keys
    with pytest.raises(ValueError, match="i64 key must be in"):
        stream_key.i64(2**63)

    floats = [-math.inf, -1e300, -2.5, -1e-300, 0.0, 1e-300, 2.5, 1e300, math.inf]
    keys = [stream_key.f64(number) for number in floats]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert [stream_key.decode_f64(key) for key in keys] == floats
    assert stream_key.f64(numpy.array(floats)).tolist() == keys
    assert stream_key.f64(-0.0) == stream_key.f64(0.0) == stream_key.f64(0)

    assert stream_key.point(3, 0) == 0b0101 and stream_key.point(0, 3) == 0b1010
    assert stream_key.decode_point(stream_key.point(12345, 67890)) == (12345, 67890)
    with pytest.raises(ValueError, match="point y must be in"):
        stream_key.point(1, 2**32)

    words = ["", "a", "ab", "abc", "b", "zzzzzzzzzz"]
    keys = [stream_key.prefix(word) for word in words]
    assert keys == sorted(keys)
    low, high = stream_key.prefix_range("ab")
    assert all(low <= stream_key.prefix(word) <= high for word in ["ab", "abc", b"ab\xff"])
    assert not low <= stream_key.prefix("ac") <= high
    assert stream_key.prefix_range(b"") == (0, 2**64 - 1)


def test_encoded_keys_make_ranges_of_the_original_values(tmp_path):
    readings = {-3.5: b"cold", -0.25: b"cool", 0.0: b"zero", 2.0: b"warm", 40.0: b"hot"}
    with spillway.StreamIndex(tmp_path, sync=False) as index:
        for temperature, label in readings.items():
            index.append(stream_key.f64(temperature), 1, label)
        found = index.range(stream_key.f64(-1.0), stream_key.f64(5.0))
        assert found["values"] == [b"cool", b"zero", b"warm"]
        assert [stream_key.decode_f64(key) for key in found["keys"].tolist()] == [-0.25, 0.0, 2.0]


def test_tiers_merge_flushed_segments_in_the_background_and_can_be_turned_off(tmp_path):
    keys = numpy.arange(40_000, dtype=numpy.uint64)[::-1].copy()
    found = {}
    for tiers in (True, False):
        with spillway.StreamIndex(tmp_path / str(tiers), buffer_bytes="64K", sync=False, tiers=tiers) as index:
            assert index.options()["tiers"] is tiers
            index.append_batch(keys, keys, keys.astype(numpy.float64))
            index.settle()
            stats = index.stats()
            assert stats["segments"] >= 8
            if tiers:
                assert 1 <= stats["tiers"] < stats["segments"] and stats["tier_merges"] >= stats["segments"] // 2
                assert stats["tier_records"] >= stats["segment_records"]
            else:
                assert (stats["tiers"], stats["tier_merges"], stats["tier_records"]) == (0, 0, 0)
            found[tiers] = index.range(1_000, 30_000, values="float")
    assert found[True]["keys"].tolist() == list(range(1_000, 30_001))
    for column in ("keys", "times", "values"):
        assert found[True][column].tolist() == found[False][column].tolist()
    with pytest.raises(spillway.InvalidArgumentError, match="tiers must be True or False"):
        spillway.StreamIndex(tmp_path / "bad", tiers="yes")


def test_nan_and_infinite_values_are_refused_naming_their_position(tmp_path):
    with spillway.StreamIndex(tmp_path, sync=False) as index:
        index.append(1, 1, 1.0)
        for bad in (math.nan, math.inf, -math.inf):
            with pytest.raises(spillway.InvalidArgumentError, match=r"key 7, time 9\) has the value (NaN|inf|-inf)"):
                index.append(7, 9, bad)
            with pytest.raises(spillway.InvalidArgumentError, match="must be finite"):
                index.update(1, 1, bad)
            with pytest.raises(spillway.InvalidArgumentError, match=r"record 2 \(key 3, time 30\) has the value"):
                index.append_batch([1, 2, 3], [10, 20, 30], numpy.array([1.0, 2.0, bad]))
            with pytest.raises(spillway.InvalidArgumentError, match=r"record 1 .*must be finite"):
                index.append_batch([1, 2], [10, 20], [b"text", struct.pack("<d", bad)])
        aggregate = index.aggregate(0, 100)
        assert aggregate == {"count": 1, "numeric": 1, "sum": 1.0, "min": 1.0, "max": 1.0}, "nothing else was written"


def test_sums_of_huge_values_are_numbers_never_nan(tmp_path):
    huge = 1.5e308  # two of them are beyond a float64
    with spillway.StreamIndex(tmp_path, buffer_bytes="64K", leaf_capacity=4, sync=False) as index:
        index.append_batch(numpy.arange(8, dtype=numpy.uint64), numpy.zeros(8, dtype=numpy.uint64), numpy.full(8, huge))
        index.flush()
        index.append_batch(
            numpy.arange(10, 18, dtype=numpy.uint64), numpy.zeros(8, dtype=numpy.uint64), numpy.full(8, -huge)
        )
        index.append(20, 0, 2.5)
        both = index.aggregate(0, 100)
        assert both["count"] == 17 and both["sum"] == pytest.approx(2.5, abs=huge * 1e-15)
        assert (both["min"], both["max"]) == (-huge, huge)
        assert index.aggregate(0, 9)["sum"] == math.inf, "beyond a float64: infinite, not None or NaN"
        assert index.aggregate(10, 17)["sum"] == -math.inf


def _files(path):
    return {entry.name: entry.read_bytes() for entry in Path(path).iterdir() if entry.is_file()}


def test_a_deleted_log_is_named_and_repair_keeps_the_rest(tmp_path):
    path = tmp_path / "index"
    index = spillway.StreamIndex(path, buffer_bytes="64K")
    index.append_batch(numpy.arange(1_000, dtype=numpy.uint64), numpy.arange(1_000, dtype=numpy.uint64), numpy.ones(1_000))
    index.flush()
    index.append_batch([5_000, 5_001], [1, 2], [1.0, 2.0])
    del index  # the last two records are in the log only
    log = sorted(path.glob("*.wal"))[0]
    log.unlink()
    for read_only in (False, True):
        with pytest.raises(spillway.CorruptionError, match=log.name):
            spillway.StreamIndex(path, read_only=read_only)
    report = spillway.StreamIndex.repair(path)
    assert report["rebuilt"] and report["records_lost"] == 2, report
    assert any(lost["file"] == log.name and lost["moved_to"] is None for lost in report["lost"]), report
    assert spillway.StreamIndex.repair(str(path))["changed"] is False, "a second repair changes nothing"
    with spillway.StreamIndex(path) as index:
        assert index.aggregate(0, 2**64 - 1)["count"] == 1_000
        assert index.verify()["unaccounted"] == []
    with pytest.raises(spillway.InvalidArgumentError, match="holds no stream index"):
        spillway.StreamIndex.repair(tmp_path / "nothing")


def test_a_damaged_segment_leaves_a_read_only_index_that_answers_the_rest(tmp_path):
    path = tmp_path / "index"
    with spillway.StreamIndex(path, sync=False) as index:
        for part in range(3):
            keys = numpy.arange(part * 100, part * 100 + 50, dtype=numpy.uint64)
            index.append_batch(keys, keys, keys.astype(numpy.float64))
            index.flush()
    middle = sorted(path.glob("*.seg"))[1]
    middle.write_bytes(middle.read_bytes()[:100])
    with pytest.raises(spillway.CorruptionError, match=middle.name):
        spillway.StreamIndex(path)
    before = _files(path)
    with pytest.warns(UserWarning, match="could not be opened"):
        reader = spillway.StreamIndex(path, read_only=True)
    with reader:
        assert reader.range(0, 99)["keys"].tolist() == list(range(50))
        assert reader.aggregate(200, 299)["count"] == 50
        with pytest.raises(spillway.CorruptionError, match=middle.name):
            reader.range(100, 199)
        with pytest.raises(spillway.CorruptionError, match=middle.name):
            reader.verify()
        assert reader.stats()["damaged_segments"] == 1
    assert _files(path) == before, "a read-only open changes nothing"
    report = spillway.StreamIndex.repair(path)
    assert report["records_lost"] == 50 and (path / "lost" / middle.name).exists(), report
    with spillway.StreamIndex(path) as index:
        assert index.aggregate(0, 2**64 - 1)["count"] == 100


def test_a_stray_file_is_kept_with_a_warning_and_moved_aside_by_repair(tmp_path):
    path = tmp_path / "index"
    with spillway.StreamIndex(path, sync=False) as index:
        index.append(1, 1, 1.0)
    (path / "000000000777.seg").write_bytes(b"not a segment")
    (path / "notes.txt").write_text("not the index's business")
    # A name past every id the index gave out is a flush a crash cut short:
    # a writer removes it. One it gave out long ago is kept.
    (path / "000000000000.seg").write_bytes(b"not a segment either")
    with pytest.warns(UserWarning, match="000000000000.seg is not part of the stream index"):
        index = spillway.StreamIndex(path)
    with index:
        report = index.verify()
        assert [stray["file"] for stray in report["unaccounted"]] == ["000000000000.seg"]
        assert index.stats()["unaccounted_files"] == 1
    assert not (path / "000000000777.seg").exists() and (path / "notes.txt").exists()
    report = spillway.StreamIndex.repair(path)
    assert report["changed"] and not report["rebuilt"]
    assert [(lost["file"], lost["moved_to"]) for lost in report["lost"]] == [("000000000000.seg", "lost/000000000000.seg")]
    with spillway.StreamIndex(path) as index:
        assert index.verify()["unaccounted"] == [] and index.get(1)["keys"].tolist() == [1]


def test_ctrl_c_stops_a_large_append_batch_between_parts(tmp_path):
    count = 20_000_000
    keys = numpy.arange(count, dtype=numpy.uint64)
    with spillway.StreamIndex(tmp_path, buffer_bytes="1M") as index:

        def interrupt_once_writing():
            # Ctrl-C once the native call is writing (not while Python packs the columns).
            deadline = time.monotonic() + 60
            while index.stats()["next_seq"] == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGINT)

        interrupter = threading.Thread(target=interrupt_once_writing)
        interrupter.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                index.append_batch(keys, keys, numpy.ones(count))
        finally:
            interrupter.join()
        written = index.stats()["next_seq"]
        assert 0 < written < count, "stopped part way, the parts before it written"
        assert index.aggregate(0, 2**64 - 1)["count"] == written
        assert index.verify()["log_writes"] + index.stats()["segment_records"] == written
