"""spillway.Aggregator: built-in and Python-defined aggregates, both engines, batches, errors."""

import collections
import os
import pickle
import random
import signal
import threading
import time

import numpy
import pyarrow
import pytest

import spillway


@pytest.mark.parametrize("engine", ["cbt", "hash"])
def test_sums_and_means_match_a_direct_computation(engine):
    rng = random.Random(7)
    pairs = [(f"k{rng.randrange(300)}", rng.randrange(-50, 50)) for _ in range(20_000)]
    totals = spillway.Aggregator("sum", engine=engine, buffer="64K")
    means = spillway.Aggregator("mean", engine=engine, buffer="64K")
    for key, value in pairs[:5_000]:
        totals.insert(key, value)
    totals.insert_batch([key for key, _ in pairs[5_000:]], [value for _, value in pairs[5_000:]])
    means.insert_batch([key for key, _ in pairs], [float(value) for _, value in pairs])
    totals.finalize()
    means.finalize()
    expected = collections.defaultdict(int)
    counts = collections.Counter()
    for key, value in pairs:
        expected[key] += value
        counts[key] += 1
    assert totals.to_dict() == dict(expected)
    for key in list(expected)[:50]:
        assert totals.get(key) == expected[key]
        assert means.get(key) == pytest.approx(expected[key] / counts[key])
    assert totals.get("never") is None
    stats = totals.stats()
    assert stats["inserts"] == 20_000 and stats["engine"] == engine and stats["memory_bytes"] > 0


@pytest.mark.parametrize("threads", [0, 1, 3])
def test_composite_functions_on_any_number_of_cbt_workers(threads):
    rng = random.Random(threads)
    keys = [rng.randrange(5_000) for _ in range(50_000)]
    values = [rng.randrange(1_000) for _ in keys]
    both = spillway.Aggregator("sum+count", buffer="16K", threads=threads)
    both.insert_batch(keys, values)
    both.finalize()
    expected = collections.defaultdict(lambda: [0, 0])
    for key, value in zip(keys, values):
        expected[key][0] += value
        expected[key][1] += 1
    assert both.to_dict() == dict(expected)
    assert both.stats()["inserts"] == 50_000


@pytest.mark.parametrize("engine,threads", [("cbt", 0), ("cbt", 2), ("hash", 0)])
def test_results_stream_page_by_page_and_a_change_part_way_is_an_error(engine, threads):
    # More keys than one page of results (65,536), over several CBT leaves.
    keys = numpy.arange(150_000, dtype=numpy.int64) % 140_000
    aggregator = spillway.Aggregator("count", engine=engine, buffer="256K", threads=threads)
    aggregator.insert_batch(keys, numpy.ones(len(keys), dtype=numpy.int64))
    aggregator.finalize()
    seen = {}
    for key, count in aggregator:
        assert key not in seen, f"{key} came twice"
        seen[key] = count
    assert len(seen) == 140_000
    assert sum(seen.values()) == 150_000 and seen[5] == 2 and seen[139_999] == 1
    # Reading, then inserting part-way: the reader's next page refuses.
    results = iter(aggregator)
    next(results)
    aggregator.insert(7, 1)
    aggregator.finalize()
    with pytest.raises(spillway.InvalidArgumentError, match="changed .* while its results were read"):
        for _ in results:
            pass
    assert dict(aggregator)[7] == 3


def test_numpy_and_arrow_batches_with_integer_keys():
    keys = numpy.arange(100_000, dtype=numpy.int64) % 1000 - 500
    values = numpy.arange(100_000, dtype=numpy.float64)
    aggregator = spillway.Aggregator("max")
    aggregator.insert_batch(keys, values)
    aggregator.insert_batch(pyarrow.array([-500, 499]), pyarrow.array([1e9, -1.0]))
    aggregator.finalize()
    result = aggregator.to_dict()
    assert len(result) == 1000
    assert result[-500] == 1e9
    assert result[499] == 99_999.0
    assert result[0] == 99_500.0
    table = aggregator.to_arrow()
    assert table.num_rows == 1000 and table.column_names == ["key", "value"]


def test_text_values_lists_and_distinct_counts():
    sets = spillway.Aggregator("collect_set", engine="hash")
    sets.insert_batch(["a", "b", "a", "a"], ["pear", "fig", "apple", "pear"])
    sets.finalize()
    assert sets.get("a") == ["apple", "pear"]
    assert sets.get("b") == ["fig"]
    distinct = spillway.Aggregator("approx_distinct(12)")
    distinct.insert_batch([b"page"] * 30_000, list(range(10_000)) * 3)
    distinct.finalize()
    assert abs(distinct.get(b"page") - 10_000) < 10_000 * 4 * 0.0163


class Spread:
    """A user-defined aggregate: max - min, with the state a (min, max) tuple."""

    def init(self, value):
        return (value, value)

    def merge(self, a, b):
        return (min(a[0], b[0]), max(a[1], b[1]))

    def finalize(self, state):
        return state[1] - state[0]


@pytest.mark.parametrize("engine", ["cbt", "hash"])
def test_python_defined_aggregates(engine):
    aggregator = spillway.Aggregator(Spread(), engine=engine, buffer="4K")
    for index in range(3_000):
        aggregator.insert(index % 7, (index * 37) % 1000)
    aggregator.finalize()
    for key in range(7):
        values = [(index * 37) % 1000 for index in range(3_000) if index % 7 == key]
        assert aggregator.get(key) == max(values) - min(values)


def test_errors_are_exceptions_of_their_kind():
    with pytest.raises(spillway.InvalidArgumentError, match="unknown aggregate function 'median'"):
        spillway.Aggregator("median")
    with pytest.raises(spillway.InvalidArgumentError, match="use 'cbt' or 'hash'"):
        spillway.Aggregator("sum", engine="btree")
    aggregator = spillway.Aggregator("sum")
    with pytest.raises(spillway.InvalidArgumentError, match="sum takes numbers"):
        aggregator.insert("k", "text")
    with pytest.raises(spillway.InvalidArgumentError, match="NaN"):
        aggregator.insert("k", float("nan"))
    with pytest.raises(spillway.InvalidArgumentError, match="keys must all be of one kind"):
        aggregator.insert(5, 1)
    with pytest.raises(spillway.InvalidArgumentError, match="2 keys but 1 values"):
        aggregator.insert_batch(["a", "b"], [1])
    with pytest.raises(spillway.InvalidArgumentError, match="must be finalized"):
        aggregator.get("k")
    aggregator.insert("big", 2**62)
    aggregator.insert("big", 2**62)
    aggregator.finalize()
    assert aggregator.get("big") == 2**63
    tiny = spillway.Aggregator("count", engine="hash", memory="64K")
    with pytest.raises(spillway.ResourcesExhaustedError, match="memory budget"):
        for index in range(100_000):
            tiny.insert(index)

    class Broken:
        def init(self, value):
            raise RuntimeError("no init today")

        def merge(self, a, b):
            return a

        def finalize(self, state):
            return state

    with pytest.raises(spillway.InvalidArgumentError, match="no init today"):
        spillway.Aggregator(Broken()).insert("k", 1)


@pytest.mark.parametrize("threads,memory", [(0, "40K"), (2, "56K")])
def test_a_tight_cbt_budget_is_kept_by_compacting(threads, memory):
    # 1,500 keys seen 120 times each: the merged results fit the budget, the
    # fragments still waiting in the tree's nodes would not.
    rng = numpy.random.default_rng(threads)
    keys = rng.integers(0, 1_500, size=180_000)
    values = rng.integers(0, 7, size=len(keys))
    totals = spillway.Aggregator("sum", buffer="4K", fan_out=4, threads=threads, memory=memory)
    for start in range(0, len(keys), 20_000):
        totals.insert_batch(keys[start : start + 20_000], values[start : start + 20_000])
    stats = totals.stats()
    assert stats["compactions"] > 0, stats
    totals.finalize()
    expected = collections.defaultdict(int)
    for key, value in zip(keys.tolist(), values.tolist()):
        expected[key] += value
    assert totals.to_dict() == dict(expected)


ENGINES = [("cbt", 0), ("cbt", 2), ("hash", 0)]


@pytest.mark.parametrize("engine,threads", ENGINES)
@pytest.mark.parametrize("function", ["min", "max", "top_k(2)", "min+count"])
def test_a_value_of_another_kind_is_refused_at_insert_and_every_other_key_finalizes(function, engine, threads):
    # Once "min" fed a string after integers poisoned every key at finalize
    # ("the CBTs lost records").
    aggregator = spillway.Aggregator(function, engine=engine, threads=threads, buffer="4K", fan_out=4)
    model = spillway.Aggregator(function, engine="hash")
    for index in range(20_000):
        key, value = f"k{index % 300}", index if index % 3 else index + 0.5
        aggregator.insert(key, value)
        model.insert(key, value)
        if index == 5_000:
            with pytest.raises(spillway.InvalidArgumentError) as refused:
                aggregator.insert("k7", "seven")
            message = str(refused.value)
            assert 'key "k7"' in message and "cannot take a byte string" in message, message
            assert "values are numbers" in message, message
    aggregator.finalize()
    model.finalize()
    assert aggregator.to_dict() == model.to_dict()
    assert len(aggregator.to_dict()) == 300


@pytest.mark.parametrize("engine,threads", ENGINES)
def test_a_batch_with_a_bad_value_is_refused_whole_naming_its_position(engine, threads):
    aggregator = spillway.Aggregator("max", engine=engine, threads=threads)
    aggregator.insert(1, 10)
    keys = list(range(100))
    values = list(range(100))
    values[37] = "thirty-seven"
    with pytest.raises(spillway.InvalidArgumentError, match="at position 37 of the batch .*key 37.*cannot take a byte string"):
        aggregator.insert_batch(keys, values)
    values[37] = float("nan")
    with pytest.raises(spillway.InvalidArgumentError, match="at position 37 .*key 37.*NaN"):
        aggregator.insert_batch(keys, values)
    # NumPy columns cross into the engine whole; the error still names the key.
    floats = numpy.arange(1000, dtype=numpy.float64)
    floats[640] = numpy.inf
    with pytest.raises(spillway.InvalidArgumentError, match="at position 640 .*key 640; nothing .*inf is not a value"):
        aggregator.insert_batch(numpy.arange(1000), floats)
    values[37] = 2**64
    with pytest.raises(spillway.InvalidArgumentError, match="at position 37 .*key 37.*outside the 64-bit range"):
        aggregator.insert_batch(keys, values)
    assert aggregator.stats()["inserts"] == 1, "nothing of the refused batches"
    aggregator.finalize()
    assert aggregator.to_dict() == {1: 10}


@pytest.mark.parametrize("engine", ["cbt", "hash"])
def test_integers_are_exact_beyond_64_bits_and_never_become_floats(engine):
    # Once a sum past 64 bits was an error, and an int past 64 bits a float.
    totals = spillway.Aggregator("sum", engine=engine)
    totals.insert_batch(["k"] * 4, [2**62] * 4)
    totals.finalize()
    assert totals.get("k") == 2**64 and isinstance(totals.get("k"), int)
    columns = spillway.Aggregator("sum", engine=engine)
    columns.insert_batch(numpy.array([5, 5]), numpy.array([2**63 - 1, 2**63 - 1], dtype=numpy.int64))
    columns.insert_batch(numpy.array([6, 6]), numpy.array([-(2**63), -1], dtype=numpy.int64))
    columns.finalize()
    assert columns.to_dict() == {5: 2**64 - 2, 6: -(2**63) - 1}
    with pytest.raises(spillway.InvalidArgumentError, match="outside the 64-bit range"):
        totals.insert("k", 2**64)
    with pytest.raises(spillway.InvalidArgumentError, match="values: at position 1 .*outside the 64-bit signed range"):
        totals.insert_batch(numpy.array([1, 2], dtype=numpy.int64), numpy.array([1, 2**63], dtype=numpy.uint64))
    with pytest.raises(spillway.InvalidArgumentError, match="keys: at position 0 .*outside the 64-bit signed range"):
        totals.insert_batch(numpy.array([2**64 - 1], dtype=numpy.uint64), numpy.array([1]))
    with pytest.raises(spillway.InvalidArgumentError, match="integer key .* outside the 64-bit range"):
        spillway.Aggregator("sum").insert(2**63, 1)

    class Huge:
        def init(self, value):
            return value

        def merge(self, a, b):
            return a + b

        def finalize(self, state):
            return state * 2**64

    huge = spillway.Aggregator(Huge(), engine=engine)
    huge.insert("k", 3)
    huge.finalize()
    assert huge.get("k") == 3 * 2**64


@pytest.mark.parametrize("engine", ["cbt", "hash"])
@pytest.mark.parametrize("function", ["count", "sum", "min", "mean", "first", "collect_set", "approx_distinct"])
def test_nan_and_infinities_are_refused_by_every_function(function, engine):
    aggregator = spillway.Aggregator(function, engine=engine)
    aggregator.insert("good", 1.5)
    for bad in [float("nan"), float("inf"), -float("inf"), numpy.float64("nan")]:
        with pytest.raises(spillway.InvalidArgumentError, match='key "bad".*floats must be finite'):
            aggregator.insert("bad", bad)
    aggregator.finalize()
    assert list(aggregator.to_dict()) == ["good"]


def test_numeric_parameters_are_checked_naming_what_is_allowed():
    for arguments, message in [
        ({"threads": -1}, "threads must be a whole number from 0 to 1024, not -1"),
        ({"threads": 100_000}, "threads must be a whole number from 0 to 1024"),
        ({"threads": 1.5}, "threads must be a whole number"),
        ({"threads": True}, "threads must be a whole number"),
        ({"fan_out": -4}, "fan_out must be a whole number from 0 to 18446744073709551615, not -4"),
        ({"fan_out": 1}, "fan_out must be from 2 to 4096, got 1"),
        ({"memory": -1}, "memory must be a size such as 512M or 4G, or a whole number of bytes"),
        ({"memory": 0}, "memory must be a size"),
        ({"memory": "-5G"}, "memory must be a size"),
        ({"memory": 2**64}, "memory must be a size"),
        ({"buffer": -4096}, "buffer must be a size such as 512M or 4G, or a whole number of bytes, from 0 to"),
        ({"buffer": "2G", "memory": "64G"}, "buffer of 2147483648 bytes is above the maximum of 1 GiB"),
        ({"engine": 3}, "engine must be 'cbt' or 'hash'"),
    ]:
        with pytest.raises(spillway.InvalidArgumentError, match=message.replace("(", r"\(").replace(")", r"\)")):
            spillway.Aggregator("sum", **arguments)
    with pytest.raises(spillway.InvalidArgumentError, match="integer key -9223372036854775809 is outside"):
        spillway.Aggregator("sum").insert(-(2**63) - 1, 1)
    aggregator = spillway.Aggregator("sum", memory="64M", buffer="4K", fan_out=2, threads=0)
    aggregator.insert(-(2**63), -(2**63))
    aggregator.finalize()
    assert aggregator.get(-(2**63)) == -(2**63)


class Unpicklable:
    """A user-defined aggregate whose state is a lambda, which pickle refuses."""

    def init(self, value):
        return lambda: value

    def merge(self, a, b):
        return a

    def finalize(self, state):
        return state()


@pytest.mark.parametrize("engine", ["cbt", "hash"])
def test_an_unpicklable_state_is_an_invalid_argument_naming_the_parameter(engine):
    aggregator = spillway.Aggregator(Unpicklable(), engine=engine)
    with pytest.raises(spillway.InvalidArgumentError, match="function: Unpicklable.init returned a state that cannot be pickled"):
        aggregator.insert("k", 1)
    with pytest.raises(spillway.InvalidArgumentError, match="must be picklable"):
        aggregator.insert_batch(["k"], [1])
    aggregator.finalize()
    assert aggregator.to_dict() == {}
    with pytest.raises(spillway.InvalidArgumentError, match="function: a user-defined aggregate needs an 'merge' method"):
        spillway.Aggregator(type("NoMerge", (), {"init": lambda self, v: v, "finalize": lambda self, s: s})())


def _sigint_during_engine_call(aggregator, seconds):
    """Sends SIGINT to this process ``seconds`` after the aggregator's next
    call into the engine starts (not while Python prepares its arguments);
    returns the timer and a list that receives the time it was sent."""
    sent = []

    def send():
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(seconds, send)
    call = aggregator._call

    def timed_call(method, *arguments):
        del aggregator._call  # once
        timer.start()
        return call(method, *arguments)

    aggregator._call = timed_call
    return timer, sent


class SlowMerge:
    """Sums, with a merge that sleeps while ``slow`` is set: a long finalize."""

    slow = False

    def init(self, value):
        return value

    def merge(self, a, b):
        if SlowMerge.slow:
            time.sleep(0.002)
        return a + b

    def finalize(self, state):
        return state


def test_ctrl_c_during_finalize_raises_keyboard_interrupt_quickly_and_keeps_every_value():
    aggregator = spillway.Aggregator(SlowMerge(), buffer="4K", fan_out=4)
    keys = [index % 2_000 for index in range(30_000)]
    aggregator.insert_batch(keys, [1] * len(keys))
    SlowMerge.slow = True
    try:
        timer, sent = _sigint_during_engine_call(aggregator, 0.3)
        with pytest.raises(KeyboardInterrupt) as interrupted:
            try:
                aggregator.finalize()
            finally:
                raised = time.monotonic()
                timer.cancel()
        timer.join()
        assert interrupted.traceback[-1].name == "_call", "raised by the engine's call"
        assert sent, "the finalize ended before the signal: make it longer"
        assert raised - sent[0] < 0.5, f"KeyboardInterrupt {raised - sent[0]:.3f} s after SIGINT"
    finally:
        SlowMerge.slow = False
    # Interrupted, the aggregator kept every value: a second finalize completes it.
    aggregator.finalize()
    assert aggregator.to_dict() == {key: 15 for key in range(2_000)}


@pytest.mark.parametrize("engine,threads", [("cbt", 2), ("hash", 0)])
def test_ctrl_c_during_insert_batch_raises_keyboard_interrupt_quickly(engine, threads):
    aggregator = spillway.Aggregator("sum+count", engine=engine, threads=threads)
    records = 12_000_000 if engine == "cbt" else 20_000_000
    # The hash engine takes these columns on its typed path, at tens of
    # millions a second while its table stays in cache: millions of keys
    # keep it busy past the signal.
    keys = numpy.arange(records, dtype=numpy.int64) % (50_000 if engine == "cbt" else 5_000_000)
    values = numpy.ones(records, dtype=numpy.int64)
    timer, sent = _sigint_during_engine_call(aggregator, 0.3)
    with pytest.raises(KeyboardInterrupt) as interrupted:
        try:
            aggregator.insert_batch(keys, values)
        finally:
            raised = time.monotonic()
            timer.cancel()
    timer.join()
    assert interrupted.traceback[-1].name == "_call", "raised by the engine's call"
    assert sent, "the batch ended before the signal: make it longer"
    assert raised - sent[0] < 0.5, f"KeyboardInterrupt {raised - sent[0]:.3f} s after SIGINT"
    # Stopped while the batch was checked, nothing went in and the aggregator
    # goes on; stopped later, part of it went in, and the aggregator refuses.
    try:
        aggregator.finalize()
    except spillway.PoisonedError as error:
        assert "interrupted part-way through insert_batch" in str(error)
    else:
        assert aggregator.stats()["inserts"] == 0 and aggregator.to_dict() == {}


def test_numpy_columns_take_the_typed_path_with_the_byte_paths_results():
    rng = numpy.random.default_rng(43)
    keys = rng.integers(-(2**40), 2**40, size=5_000)[rng.integers(0, 5_000, size=200_000)]
    values = rng.integers(-1_000, 1_000, size=len(keys))
    typed = spillway.Aggregator("sum+count+min+mean+variance", engine="hash")
    model = spillway.Aggregator("sum+count+min+mean+variance", engine="cbt")
    for start in range(0, len(keys), 30_000):
        typed.insert_batch(keys[start : start + 30_000], values[start : start + 30_000])
        model.insert_batch(keys[start : start + 30_000], values[start : start + 30_000])
    typed.insert(7, 5)  # one pair joins the typed path as a batch of one
    model.insert(7, 5)
    typed.finalize()
    model.finalize()
    stats = typed.stats()
    assert stats["path"] == "typed" and stats["engine"] == "hash" and stats["inserts"] == len(keys) + 1
    assert stats["groups"] == len(model.to_dict()) and stats["memory_bytes"] > 0
    expected = model.to_dict()
    got = typed.to_dict()
    assert got.keys() == expected.keys()
    for key, (total, count, least, mean, variance) in expected.items():
        assert got[key][:3] == [total, count, least], key
        assert got[key][3] == pytest.approx(mean, rel=1e-12)
        assert (got[key][4] is None) == (variance is None)
        if variance is not None:
            assert got[key][4] == pytest.approx(variance, rel=1e-9)
    some = int(keys[0])
    assert typed.get(some) == got[some] and typed.get(2**50) is None
    table = typed.to_arrow().sort_by("key")
    modelled = model.to_arrow().sort_by("key")
    assert table.column_names == modelled.column_names == ["key", "sum", "count", "min", "mean", "variance"]
    assert str(table.schema.field("key").type) == "int64" and table.num_rows == len(expected)
    for name in ["key", "sum", "count", "min"]:
        assert table.column(name).to_pylist() == modelled.column(name).to_pylist(), name
    assert table.column("variance").null_count == modelled.column("variance").null_count
    assert numpy.allclose(table.column("mean").to_numpy(), modelled.column("mean").to_numpy(), rtol=1e-12)
    # A function with no typed form stays on the byte path.
    tops = spillway.Aggregator("top_k(2)", engine="hash")
    tops.insert_batch(keys[:1000], values[:1000])
    assert "path" not in tops.stats()


def test_the_typed_path_keeps_its_first_value_type_and_exact_wide_sums():
    floats = spillway.Aggregator("sum", engine="hash")
    floats.insert_batch(numpy.array([1, 2]), numpy.array([0.5, 1.5]))
    floats.insert_batch(numpy.array([1]), numpy.array([2], dtype=numpy.int64))  # integers join as floats
    floats.insert(2, 1)
    assert floats.to_dict() == {1: 2.5, 2: 2.5}
    integers = spillway.Aggregator("sum", engine="hash")
    integers.insert_batch(numpy.array([5, 5, 5]), numpy.array([2**63 - 1] * 3, dtype=numpy.int64))
    with pytest.raises(spillway.InvalidArgumentError, match="values are integers .* cannot take floats"):
        integers.insert_batch(numpy.array([5]), numpy.array([0.5]))
    with pytest.raises(spillway.InvalidArgumentError, match="keys must be int"):
        integers.insert("five", 1)
    with pytest.raises(spillway.InvalidArgumentError, match="key 5: .*cannot take str values"):
        integers.insert(5, "one")
    with pytest.raises(spillway.InvalidArgumentError, match="at position 1 .*key 3; nothing .*NaN"):
        spillway.Aggregator("max", engine="hash").insert_batch(numpy.array([2, 3]), numpy.array([1.0, numpy.nan]))
    assert integers.to_dict() == {5: 3 * (2**63 - 1)} and isinstance(integers.get(5), int)
    assert integers.stats()["inserts"] == 3
    single = spillway.Aggregator("variance", engine="hash")
    single.insert_batch(numpy.array([1, 2, 2]), numpy.array([4.0, 1.0, 3.0]))
    assert single.to_dict() == {1: None, 2: 2.0}


def test_the_typed_path_keeps_its_memory_budget():
    aggregator = spillway.Aggregator("count", engine="hash", memory="1M")
    with pytest.raises(spillway.ResourcesExhaustedError, match="over its memory budget of 1048576 bytes") as refused:
        aggregator.insert_batch(numpy.arange(200_000), numpy.ones(200_000, dtype=numpy.int64))
    # The rows before the refused chunk went in (a prefix), and the error counts them.
    inserted = aggregator.stats()["inserts"]
    assert 0 < inserted < 200_000
    assert f"first {inserted} rows were inserted" in str(refused.value)
    assert len(aggregator.to_dict()) == inserted and aggregator.get(0) == 1
    with pytest.raises(spillway.ResourcesExhaustedError, match="memory budget"):
        aggregator.insert_batch(numpy.arange(2), numpy.ones(2, dtype=numpy.int64))
    assert aggregator.stats()["inserts"] == inserted


@pytest.mark.parametrize("engine", ["cbt", "hash"])
def test_to_arrow_gives_a_column_per_function(engine):
    aggregator = spillway.Aggregator("sum+max+sum+count", engine=engine)
    aggregator.insert_batch(["a", "b", "a"], [1, 5, 2])
    aggregator.finalize()
    table = aggregator.to_arrow().sort_by("key")
    assert table.column_names == ["key", "sum", "max", "sum_2", "count"]
    assert table.to_pylist() == [
        {"key": "a", "sum": 3, "max": 2, "sum_2": 3, "count": 2},
        {"key": "b", "sum": 5, "max": 5, "sum_2": 5, "count": 1},
    ]


def test_several_key_and_value_columns_group_by_tuples_on_the_typed_path():
    rng = numpy.random.default_rng(7)
    rows = 60_000
    regions = numpy.array([f"r{index}" for index in range(7)])[rng.integers(0, 7, size=rows)]
    stores = rng.integers(-3, 40, size=rows)
    names = pyarrow.array([f"item-{index}" for index in rng.integers(0, 5, size=rows)])
    units = rng.integers(0, 100, size=rows)
    prices = rng.random(rows) * 10
    aggregator = spillway.Aggregator(
        ["sum", "mean", "max", "count"], engine="hash", keys=["region", "store", "item"]
    )
    half = rows // 2
    aggregator.insert_batch(
        [regions[:half], stores[:half], names[:half]], [units[:half], prices[:half], prices[:half], units[:half]]
    )
    # pandas and Polars columns, and a pair at a time, join the same groups.
    import pandas
    import polars

    aggregator.insert_batch(
        [pandas.Series(regions[half:]), polars.Series(stores[half:]), names[half:]],
        [pandas.Series(units[half:]), polars.Series(prices[half:]), prices[half:], units[half:]],
    )
    aggregator.insert(("r0", 1, "item-0"), (5, 2.5, 2.5, 5))
    expected = collections.defaultdict(lambda: [0, [], -numpy.inf, 0])
    names_list = names.to_pylist()
    for region, store, item, unit, price in zip(regions.tolist(), stores.tolist(), names_list, units, prices):
        group = expected[(region, store, item)]
        group[0] += int(unit)
        group[1].append(float(price))
        group[2] = max(group[2], float(price))
        group[3] += 1
    group = expected[("r0", 1, "item-0")]
    group[0] += 5
    group[1].append(2.5)
    group[2] = max(group[2], 2.5)
    group[3] += 1
    aggregator.finalize()
    got = aggregator.to_dict()
    assert got.keys() == expected.keys() and len(got) > 1000
    for key, (total, prices_seen, most, seen) in expected.items():
        assert got[key][0] == total and got[key][2] == most and got[key][3] == seen, key
        assert got[key][1] == pytest.approx(sum(prices_seen) / seen, rel=1e-12), key
    assert aggregator.get(("r0", 1, "item-0")) == got[("r0", 1, "item-0")]
    assert aggregator.get(("r0", 1, "no such item")) is None
    table = aggregator.to_arrow()
    assert table.column_names == ["region", "store", "item", "sum", "mean", "max", "count"]
    assert table.num_rows == len(expected)
    assert str(table.schema.field("region").type) == "large_string"
    assert str(table.schema.field("store").type) == "int64"
    stats = aggregator.stats()
    assert stats["path"] == "typed" and stats["inserts"] == rows + 1 and stats["groups"] == len(expected)


def test_text_keys_from_arrow_pandas_and_polars_take_the_typed_path():
    import pandas
    import polars

    words = ["apple", "pear", "", "fig", "pear", "ümlaut"]
    counts = numpy.arange(len(words), dtype=numpy.int64)
    for keys in [pyarrow.array(words), pyarrow.chunked_array([words[:2], words[2:]]), pandas.Series(words),
                 polars.Series(words), pyarrow.array(words, type=pyarrow.large_string())]:
        aggregator = spillway.Aggregator("sum", engine="hash")
        aggregator.insert_batch(keys, counts)
        assert aggregator.stats()["path"] == "typed", type(keys)
        aggregator.insert("fig", 10)
        aggregator.insert_batch(["apple"], [100])  # a list joins once the path is typed
        assert aggregator.to_dict() == {"apple": 100, "pear": 5, "": 2, "fig": 13, "ümlaut": 5}
        assert aggregator.get("pear") == 5 and aggregator.get("plum") is None
        assert aggregator.to_arrow().sort_by("key").column("key").to_pylist() == ["", "apple", "fig", "pear", "ümlaut"]
        with pytest.raises(spillway.InvalidArgumentError, match="keys must be str .*text.*, not int"):
            aggregator.insert_batch(numpy.array([1]), numpy.array([1]))
    binary = spillway.Aggregator("count", engine="hash")
    binary.insert_batch(pyarrow.array([b"\x00", b"\xff", b"\x00"]), numpy.ones(3, dtype=numpy.int64))
    assert binary.to_dict() == {b"\x00": 2, b"\xff": 1}
    # Nulls are refused, naming the position; nothing goes in.
    nulls = spillway.Aggregator("sum", engine="hash")
    with pytest.raises(spillway.InvalidArgumentError, match="position 1 .* must not be null"):
        nulls.insert_batch(pyarrow.array(["a", None]), numpy.array([1, 2]))
    with pytest.raises(spillway.InvalidArgumentError, match="position 0 .* must not be null"):
        nulls.insert_batch(pyarrow.array(["a"]), pyarrow.array([None], type=pyarrow.int64()))


def test_several_columns_are_refused_clearly():
    with pytest.raises(spillway.InvalidArgumentError, match="takes engine='hash'"):
        spillway.Aggregator("sum", keys=2)
    with pytest.raises(spillway.InvalidArgumentError, match="typed form.*top_k"):
        spillway.Aggregator("top_k(2)", engine="hash", keys=2)
    with pytest.raises(spillway.InvalidArgumentError, match="keys must be a number of key columns"):
        spillway.Aggregator("sum", engine="hash", keys=["a", "a"])
    with pytest.raises(spillway.InvalidArgumentError, match="share the names"):
        spillway.Aggregator("sum+count", engine="hash", keys=["sum", "b"])
    with pytest.raises(spillway.InvalidArgumentError, match="takes engine='hash'"):
        spillway.Aggregator("sum+count").insert_batch(numpy.arange(3), [numpy.arange(3), numpy.arange(3)])
    pairs = spillway.Aggregator("sum+mean", engine="hash", keys=2)
    with pytest.raises(spillway.InvalidArgumentError, match="give keys as a list of 2"):
        pairs.insert_batch(numpy.arange(3), numpy.arange(3))
    with pytest.raises(spillway.InvalidArgumentError, match="3 value columns for 2 functions"):
        pairs.insert_batch([numpy.arange(3), numpy.arange(3)], [numpy.arange(3)] * 3)
    pairs.insert_batch([numpy.arange(3), pyarrow.array(["a", "b", "c"])], [numpy.arange(3), numpy.arange(3.0)])
    with pytest.raises(spillway.InvalidArgumentError, match="key columns of \\[2, 3\\] keys"):
        pairs.insert_batch([numpy.arange(3), pyarrow.array(["a", "b"])], [numpy.arange(3), numpy.arange(3.0)])
    with pytest.raises(spillway.InvalidArgumentError, match="key column 1 must be str"):
        pairs.insert_batch([numpy.arange(3), numpy.arange(3)], [numpy.arange(3), numpy.arange(3.0)])
    with pytest.raises(spillway.InvalidArgumentError, match="cannot take floats"):
        pairs.insert_batch([numpy.arange(1), ["a"]], [numpy.array([0.5]), numpy.array([1.0])])
    with pytest.raises(spillway.InvalidArgumentError, match="give a key as a tuple of 2"):
        pairs.insert(1, (1, 1.0))
    assert pairs.stats()["inserts"] == 3 and pairs.to_dict() == {(0, "a"): [0, 0.0], (1, "b"): [1, 1.0], (2, "c"): [2, 2.0]}



def test_strided_narrow_and_sliced_columns_are_read_correctly():
    keys = numpy.arange(20, dtype=numpy.int64) % 4
    values = numpy.arange(20, dtype=numpy.int32)
    aggregator = spillway.Aggregator("sum", engine="hash")
    aggregator.insert_batch(keys[::2], values[::2])  # strided views, int32 values
    aggregator.insert_batch(pyarrow.array(keys).slice(1, 3), pyarrow.array(values).slice(1, 3))
    expected = collections.Counter()
    for key, value in list(zip(keys[::2].tolist(), values[::2].tolist())) + [(1, 1), (2, 2), (3, 3)]:
        expected[key] += value
    assert aggregator.to_dict() == dict(expected)
