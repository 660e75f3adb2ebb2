"""spillway.knn.SSTree: every method and build against a NumPy oracle, bit for bit; input dtypes
and layouts; duplicates and ties; bad input; save and load; a damaged file; statistics; Ctrl-C."""

import concurrent.futures
import os
import time

import numpy
import pytest

import spillway
from spillway.knn import SSTree

METHODS = ("auto", "psb", "bnb", "brute")
BUILDS = ("kmeans", "hilbert")


def oracle(points, queries, k):
    """The answer by definition: squared differences summed in float64 in dimension order (each
    coordinate widened to float64 first), the k smallest sums, ties by row, distances their square roots."""
    points = numpy.asarray(points)
    queries = numpy.atleast_2d(numpy.asarray(queries)).astype(numpy.float64)
    n, dims = points.shape
    rows = numpy.arange(n)
    distances = numpy.empty((len(queries), k))
    indices = numpy.empty((len(queries), k), dtype=numpy.int64)
    for at, query in enumerate(queries):
        acc = numpy.zeros(n)
        for j in range(dims):
            acc += (query[j] - points[:, j].astype(numpy.float64)) ** 2
        order = numpy.lexsort((rows, acc))[:k]
        distances[at] = numpy.sqrt(acc[order])
        indices[at] = order
    return distances, indices


def assert_exact(found, expected, what=""):
    distances, indices = found
    assert distances.dtype == numpy.float64 and indices.dtype == numpy.int64, what
    assert distances.shape == expected[0].shape and indices.shape == expected[1].shape, what
    assert numpy.array_equal(indices, expected[1]), f"{what}: indices differ"
    assert numpy.array_equal(distances, expected[0]), f"{what}: distances differ"


def uniform(rng, n, dims, dtype):
    return rng.random((n, dims)).astype(dtype)


def clustered(rng, n, dims, dtype):
    centres = rng.random((8, dims)) * 100
    labels = rng.integers(0, 8, n)
    return (centres[labels] + rng.normal(scale=0.5, size=(n, dims))).astype(dtype)


def queries_for(rng, points, count):
    """Half of them points of the set (distance 0), half near it."""
    picked = points[rng.integers(0, len(points), count // 2)].astype(numpy.float64)
    spread = points.astype(numpy.float64)
    low, high = spread.min(axis=0), spread.max(axis=0)
    fresh = low + rng.random((count - count // 2, points.shape[1])) * (high - low + 1)
    return numpy.concatenate([picked, fresh])


@pytest.mark.parametrize("dims", [1, 2, 3, 8, 17, 64, 130])
@pytest.mark.parametrize("kind", ["uniform", "clustered"])
def test_every_method_and_build_is_exact(dims, kind):
    rng = numpy.random.default_rng(dims * 7 + len(kind))
    n = 1_001 if dims > 17 else 2_003  # not a multiple of the leaf size
    for dtype in (numpy.float32, numpy.float64):
        points = (uniform if kind == "uniform" else clustered)(rng, n, dims, dtype)
        queries = queries_for(rng, points, 12)
        expected = {k: oracle(points, queries, k) for k in (1, 5, 100)}
        for build in BUILDS:
            tree = SSTree(points, leaf_size=16, degree=6, build=build, seed=dims)
            assert tree.dtype == ("f32" if dtype == numpy.float32 else "f64")
            for method in METHODS:
                for k, answer in expected.items():
                    assert_exact(
                        tree.query(queries, k, method=method),
                        answer,
                        f"{kind} d={dims} {numpy.dtype(dtype).name} {build} {method} k={k}",
                    )


def test_duplicates_and_ties_go_by_row():
    # An integer grid, every point three times: most distances tie.
    grid = numpy.array([(x, y) for x in range(8) for y in range(8)], dtype=numpy.float64)
    points = numpy.concatenate([grid, grid[::-1], grid])
    rng = numpy.random.default_rng(5)
    queries = numpy.concatenate([grid[::5], grid[::7] + 0.5, rng.integers(-2, 10, (10, 2))])
    for build in BUILDS:
        tree = SSTree(points, leaf_size=4, degree=3, build=build)
        for method in METHODS:
            for k in (1, 5, 100, len(points)):
                assert_exact(tree.query(queries, k, method=method), oracle(points, queries, k), f"{build} {method} {k}")


def test_one_point_every_point_the_same_and_fewer_points_than_a_leaf():
    for points in (
        numpy.array([[1.5, -2.0, 3.0]]),
        numpy.full((300, 3), 7.25),
        numpy.random.default_rng(1).random((5, 3)),
    ):
        queries = numpy.array([[0.0, 0.0, 0.0], [7.25, 7.25, 7.25], [1.5, -2.0, 3.0]])
        for build in BUILDS:
            tree = SSTree(points, build=build)
            assert len(tree) == len(points)
            for method in METHODS:
                for k in sorted({1, min(5, len(points)), len(points)}):
                    assert_exact(tree.query(queries, k, method=method), oracle(points, queries, k), f"{len(points)}")


def test_input_layouts_and_dtypes():
    rng = numpy.random.default_rng(11)
    base = rng.random((700, 5)) * 10
    queries = queries_for(rng, base, 9)
    expected = oracle(base, queries, 5)
    wide = numpy.zeros((1400, 15))
    wide[::2, ::3] = base
    for points in (
        numpy.asfortranarray(base),
        wide[::2, ::3],  # a strided view
        base.astype(">f8"),  # big-endian
        base.tolist(),  # lists of floats
    ):
        tree = SSTree(points, leaf_size=8)
        assert tree.dtype == "f64"
        assert_exact(tree.query(queries, 5), expected)
        assert_exact(tree.query(numpy.asfortranarray(queries), 5), expected)
        assert_exact(tree.query(queries.astype(">f8"), 5), expected)
    # float32 stays float32 (big-endian or strided too); distances from the float32 values.
    single = base.astype(numpy.float32)
    for points in (single, single.astype(">f4"), numpy.asfortranarray(single)):
        tree = SSTree(points, leaf_size=8)
        assert tree.dtype == "f32"
        assert_exact(tree.query(queries, 5), oracle(single, queries, 5))
        # float32 queries are widened exactly.
        assert_exact(tree.query(queries.astype(numpy.float32), 5), oracle(single, queries.astype(numpy.float32), 5))
    # Other real dtypes become float64.
    integers = rng.integers(-50, 50, (300, 3))
    for points in (
        integers,
        integers.astype(numpy.int32),
        (integers + 50).astype(numpy.uint8),
        integers.astype(numpy.float16),
    ):
        tree = SSTree(points, leaf_size=8)
        assert tree.dtype == "f64"
        assert_exact(tree.query(integers[:7], 4), oracle(points.astype(numpy.float64), integers[:7], 4))
    flags = rng.random((50, 4)) < 0.5
    tree = SSTree(flags)
    assert tree.dtype == "f64"
    assert_exact(tree.query(flags[:3], 3), oracle(flags.astype(numpy.float64), flags[:3], 3))


def test_a_one_dimensional_query_is_one_query_and_stats_come_on_request():
    rng = numpy.random.default_rng(3)
    points = rng.random((400, 4))
    tree = SSTree(points, leaf_size=16)
    distances, indices = tree.query(points[17], 3)
    assert distances.shape == indices.shape == (1, 3)
    assert indices[0, 0] == 17 and distances[0, 0] == 0.0
    assert_exact(tree.query(list(points[17]), 3), oracle(points, points[17:18], 3))
    for method in METHODS:
        distances, indices, stats = tree.query(points[:6], 4, method=method, stats=True)
        assert_exact((distances, indices), oracle(points, points[:6], 4))
        assert set(stats) == {
            "queries", "k", "method", "device", "nodes_visited", "leaves_scanned", "distances_computed",
            "warp_efficiency", "kernel_s", "query_s",
        }
        assert stats["queries"] == 6 and stats["k"] == 4
        assert stats["device"] == "cpu" and stats["warp_efficiency"] is None and stats["kernel_s"] is None
        assert stats["method"] in ("psb", "bnb", "brute")
        if method != "auto":
            assert stats["method"] == method
        assert stats["distances_computed"] >= 6 * 4
    # The arrays are the caller's: writable, not views of each other.
    distances, indices = tree.query(points[:2], 2)
    distances[:] = -1
    indices[:] = -1


def test_shape_statistics_length_and_repr():
    points = numpy.random.default_rng(4).random((1_000, 6), dtype=numpy.float32)
    tree = SSTree(points, leaf_size=20, degree=5, build="hilbert", threads=2)
    assert len(tree) == 1_000 and tree.dims == 6 and tree.dtype == "f32"
    stats = tree.stats()
    assert set(stats) == {
        "points", "dims", "dtype", "build", "leaf_size", "degree", "leaves", "nodes", "levels",
        "leaf_fill", "bytes", "build_s",
    }
    assert stats["points"] == 1_000 and stats["dims"] == 6 and stats["dtype"] == "f32"
    assert stats["build"] == "hilbert" and stats["leaf_size"] == 20 and stats["degree"] == 5
    assert stats["leaves"] >= 50 and stats["nodes"] > stats["leaves"] and stats["levels"] >= 3
    assert 0 < stats["leaf_fill"] <= 1 and stats["bytes"] >= 1_000 * 6 * 4 and stats["build_s"] >= 0
    tree.verify()
    assert repr(tree) == "SSTree(1000 points, 6 dims, f32)"
    assert "knn" in spillway.__all__ and spillway.knn.SSTree is SSTree


def test_the_same_seed_builds_the_same_tree():
    rng = numpy.random.default_rng(8)
    points = clustered(rng, 900, 3, numpy.float64)
    queries = queries_for(rng, points, 10)
    for build in BUILDS:
        first, second = (SSTree(points, build=build, seed=9, leaf_size=10) for _ in range(2))
        assert {**first.stats(), "build_s": 0} == {**second.stats(), "build_s": 0}
        for method in ("psb", "bnb"):
            # The same tree visits the same nodes and computes the same distances.
            one, other = (tree.query(queries, 4, method=method, stats=True)[2] for tree in (first, second))
            assert {**one, "query_s": 0} == {**other, "query_s": 0}, (build, method)


def test_save_and_load_give_the_same_answers(tmp_path):
    rng = numpy.random.default_rng(6)
    for dtype in (numpy.float32, numpy.float64):
        points = clustered(rng, 1_500, 7, dtype)
        queries = queries_for(rng, points, 10)
        tree = SSTree(points, leaf_size=12, degree=4)
        path = tmp_path / f"tree-{numpy.dtype(dtype).name}.sst"
        tree.save(path)
        for loaded in (SSTree.load(path), SSTree.load(str(path))):
            assert isinstance(loaded, SSTree)
            assert len(loaded) == len(tree) and loaded.dims == 7 and loaded.dtype == tree.dtype
            stats, original = loaded.stats(), tree.stats()
            assert stats["build_s"] == 0
            assert {**stats, "build_s": None} == {**original, "build_s": None}
            loaded.verify()
            for method in METHODS:
                assert_exact(loaded.query(queries, 9, method=method), oracle(points, queries, 9), method)
    assert not [name for name in os.listdir(tmp_path) if name.startswith("spillway-")]


def test_a_damaged_file_is_a_corruption_error(tmp_path):
    points = numpy.random.default_rng(2).random((2_000, 4))
    path = tmp_path / "tree.sst"
    SSTree(points).save(path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x08
    path.write_bytes(bytes(data))
    with pytest.raises(spillway.CorruptionError, match="tree.sst"):
        SSTree.load(path)
    path.write_bytes(bytes(data[: len(data) // 3]))
    with pytest.raises(spillway.SpillwayError, match="tree.sst"):
        SSTree.load(path)
    with pytest.raises(spillway.SpillwayIOError):
        SSTree.load(tmp_path / "missing.sst")


def test_bad_arguments_raise_invalid_argument_errors():
    points = numpy.random.default_rng(9).random((50, 3))
    tree = SSTree(points, leaf_size=8)
    error = spillway.InvalidArgumentError
    with pytest.raises(error, match="k"):
        tree.query(points[:2], 0)
    with pytest.raises(error, match="51"):
        tree.query(points[:2], 51)
    with pytest.raises(error, match="k must be a whole number"):
        tree.query(points[:2], 2.5)
    with pytest.raises(error, match="k must be a whole number"):
        tree.query(points[:2], -1)
    with pytest.raises(error, match="unknown method"):
        tree.query(points[:2], 1, method="fastest")
    with pytest.raises(error, match="method must be a name"):
        tree.query(points[:2], 1, method=None)
    with pytest.raises(error, match="3"):
        tree.query(numpy.zeros((2, 4)), 1)
    with pytest.raises(error, match="3 coordinates"):
        tree.query(numpy.zeros(2), 1)
    with pytest.raises(error, match="2-D"):
        tree.query(numpy.zeros((2, 3, 1)), 1)
    with pytest.raises(error, match="NaN"):
        tree.query([[0.0, numpy.nan, 1.0]], 1)
    with pytest.raises(error, match="infinite"):
        tree.query([[0.0, 1.0, numpy.inf]], 1)
    with pytest.raises(error, match="complex"):
        tree.query(numpy.zeros((1, 3), dtype=complex), 1)

    bad = points.copy()
    bad[7, 2] = numpy.nan
    with pytest.raises(error, match=r"NaN") as raised:
        SSTree(bad)
    assert "7" in str(raised.value) and "2" in str(raised.value)
    bad[7, 2] = -numpy.inf
    with pytest.raises(error, match="infinite"):
        SSTree(bad)
    with pytest.raises(error, match="empty"):
        SSTree(numpy.zeros((0, 3)))
    with pytest.raises(error, match="dimensions"):
        SSTree(numpy.zeros((4, 0)))
    with pytest.raises(error, match="2-D"):
        SSTree(numpy.zeros(5))
    with pytest.raises(error, match="2-D"):
        SSTree(numpy.zeros((2, 2, 2)))
    with pytest.raises(error, match="2-D"):
        SSTree([])
    for values, dtype in (
        (numpy.zeros((3, 2), dtype=complex), "complex"),
        (numpy.array([["a", "b"]]), "<U1"),
        (numpy.array([[object(), object()]]), "object"),
    ):
        with pytest.raises(error, match=dtype):
            SSTree(values)
    with pytest.raises(error, match="unknown build"):
        SSTree(points, build="random")
    with pytest.raises(error, match="build must be a name"):
        SSTree(points, build=3)
    with pytest.raises(error, match="leaf_size"):
        SSTree(points, leaf_size=0)
    with pytest.raises(error, match="leaf_size"):
        SSTree(points, leaf_size=-3)
    with pytest.raises(error, match="degree"):
        SSTree(points, degree=1)
    with pytest.raises(error, match="threads"):
        SSTree(points, threads=-1)
    with pytest.raises(TypeError):
        SSTree(points, 64)  # options are keyword-only
    # Every one of these is also a ValueError, as the built-in errors it stands for.
    assert issubclass(error, ValueError)


def test_queries_from_several_threads_share_one_tree():
    rng = numpy.random.default_rng(12)
    points = rng.random((3_000, 8))
    tree = SSTree(points, leaf_size=32)
    batches = [queries_for(rng, points, 20) for _ in range(8)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        found = list(pool.map(lambda queries: tree.query(queries, 10, threads=1), batches))
    for queries, answer in zip(batches, found):
        assert_exact(answer, oracle(points, queries, 10))


def test_ctrl_c_stops_a_long_batch(ctrl_c):
    rng = numpy.random.default_rng(13)
    points = rng.random((100_000, 16), dtype=numpy.float32)
    tree = SSTree(points, build="hilbert")
    queries = rng.random((4_000, 16))
    started = time.monotonic()
    signal = ctrl_c(after=0.2)
    with pytest.raises(KeyboardInterrupt):
        tree.query(queries, 10, method="brute")
    latency = signal.latency()
    assert latency < 1.0, f"the batch took {latency:.2f} s to stop after Ctrl-C"
    assert time.monotonic() - started < 30
    # The tree is unharmed.
    assert_exact(tree.query(queries[:2], 3), oracle(points, queries[:2], 3))

