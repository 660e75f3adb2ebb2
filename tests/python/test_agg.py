"""spillway.Aggregator: built-in and Python-defined aggregates, both engines, batches, errors."""

import collections
import random

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
    with pytest.raises(spillway.InvalidArgumentError, match="integer sum overflow"):
        aggregator.get("big")
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
