"""spillway.knn on the GPU: every GPU search equals the CPU's answer bit for bit (and the NumPy
oracle's), PSB takes the CPU's path node for node, large k, many queries, odd shapes; and, on
machines without a GPU, the clear errors and the CPU fallback of ``device="auto"``.

The GPU tests run where ``spillway.knn.gpu_unavailable()`` is None (scripts/gpu-check runs them
on the GPU machine) and are skipped elsewhere; the others run everywhere."""

import concurrent.futures

import numpy
import pytest

import spillway
from spillway.knn import SSTree, gpu_unavailable

from test_knn import assert_exact, clustered, oracle, queries_for, uniform

WHY = gpu_unavailable()
needs_gpu = pytest.mark.skipif(WHY is not None, reason=f"no GPU here: {WHY}")
without_gpu = pytest.mark.skipif(WHY is None, reason="a GPU is present")


def on_both(tree, queries, k, method):
    """The GPU's answer and statistics, and the CPU's answer by the same method (bnb for auto)."""
    *gpu, stats = tree.query(queries, k, method=method, device="cuda", stats=True)
    cpu = tree.query(queries, k, method=method if method != "auto" else "bnb", device="cpu")
    assert stats["device"] == "cuda"
    return tuple(gpu), cpu, stats


@needs_gpu
@pytest.mark.parametrize("dims", [2, 3, 8, 16, 64, 130])
@pytest.mark.parametrize("kind", ["uniform", "clustered"])
@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
def test_every_gpu_search_is_the_cpus_answer(dims, kind, dtype):
    rng = numpy.random.default_rng(dims * 10 + (kind == "uniform") + 2 * (dtype == numpy.float32))
    make = uniform if kind == "uniform" else clustered
    points = make(rng, 6_007, dims, dtype)
    queries = queries_for(rng, points, 300)
    tree = SSTree(points, leaf_size=32, degree=32, build="kmeans" if dims % 2 == 0 else "hilbert")
    expected = oracle(points, queries[:40], 10)
    for method in ("psb", "brute", "auto"):
        for k in (1, 10, 100):
            gpu, cpu, stats = on_both(tree, queries, k, method)
            assert_exact(gpu, cpu, f"{method}, k = {k}")
            assert stats["queries"] == len(queries) and stats["k"] == k
        found = tree.query(queries[:40], 10, method=method, device="cuda")
        assert_exact(found, expected, f"{method} against the oracle")


@needs_gpu
@pytest.mark.parametrize("degree", [2, 5, 32, 33, 128])
def test_psb_on_the_gpu_walks_the_cpus_path(degree):
    rng = numpy.random.default_rng(degree)
    points = clustered(rng, 20_000, 6, numpy.float64)
    queries = queries_for(rng, points, 200)
    tree = SSTree(points, leaf_size=37, degree=degree)
    # 32 and 33: the last k whose list is kept in registers, and the first kept in shared memory.
    for k in (1, 7, 32, 33, 64):
        *gpu, gpu_stats = tree.query(queries, k, method="psb", device="cuda", stats=True)
        *cpu, cpu_stats = tree.query(queries, k, method="psb", device="cpu", stats=True)
        assert_exact(tuple(gpu), tuple(cpu), f"degree {degree}, k = {k}")
        assert gpu_stats["nodes_visited"] == cpu_stats["nodes_visited"], (degree, k)
        assert gpu_stats["leaves_scanned"] == cpu_stats["leaves_scanned"], (degree, k)
        assert 0 < gpu_stats["warp_efficiency"] <= 1


@needs_gpu
def test_large_k_spills_and_k_equal_to_n_works():
    rng = numpy.random.default_rng(3)
    points = uniform(rng, 3_001, 4, numpy.float32)
    queries = queries_for(rng, points, 50)
    tree = SSTree(points, leaf_size=16)
    for k in (127, 128, 129, 500, len(points)):
        for method in ("psb", "brute"):
            gpu, cpu, _ = on_both(tree, queries, k, method)
            assert_exact(gpu, cpu, f"{method}, k = {k}")


@needs_gpu
def test_duplicates_ties_and_tiny_trees():
    rng = numpy.random.default_rng(5)
    grid = numpy.repeat(rng.integers(0, 4, (500, 3)).astype(numpy.float64), 4, axis=0)
    for points in (grid, grid[:7], grid[:1], numpy.zeros((100, 2))):
        tree = SSTree(points, leaf_size=8, degree=4)
        queries = numpy.vstack([points[:5], points[:5] + 0.5])
        k = min(len(points), 9)
        for method in ("psb", "brute", "auto"):
            gpu, cpu, _ = on_both(tree, queries, k, method)
            assert_exact(gpu, cpu, f"{len(points)} points, {method}")
            assert_exact(gpu, oracle(points, queries, k), f"{len(points)} points, {method}, oracle")


@needs_gpu
def test_single_queries_many_queries_and_a_loaded_tree(tmp_path):
    rng = numpy.random.default_rng(8)
    points = clustered(rng, 50_000, 3, numpy.float32)
    tree = SSTree(points)
    many = queries_for(rng, points, 70_000)
    for method in ("psb", "brute"):
        gpu, cpu, stats = on_both(tree, many, 5, method)
        assert_exact(gpu, cpu, f"{method}, 70,000 queries")
        assert stats["queries"] == 70_000
    one = many[123]
    assert_exact(tree.query(one, 10, device="cuda", method="brute"), tree.query(one, 10, method="psb"))
    tree.save(tmp_path / "t.sst")
    loaded = SSTree.load(tmp_path / "t.sst")
    assert_exact(loaded.query(many[:500], 10, device="cuda"), tree.query(many[:500], 10))
    assert loaded.query(many[:10], 3, device="auto", stats=True)[2]["device"] == "cuda"
    # Threads take turns on the device.
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(tree.query, many[i * 100:(i + 1) * 100], 4, device="cuda") for i in range(8)]
        for i, future in enumerate(futures):
            assert_exact(future.result(), tree.query(many[i * 100:(i + 1) * 100], 4))


@needs_gpu
def test_bad_gpu_arguments():
    tree = SSTree(numpy.random.default_rng(1).random((500, 3)))
    with pytest.raises(spillway.InvalidArgumentError, match="CPU only"):
        tree.query(numpy.zeros((2, 3)), 3, method="bnb", device="cuda")
    with pytest.raises(spillway.InvalidArgumentError, match="k = 501"):
        tree.query(numpy.zeros((2, 3)), 501, device="cuda")
    with pytest.raises(spillway.InvalidArgumentError, match="3"):
        tree.query(numpy.zeros((2, 4)), 3, device="cuda")
    with pytest.raises(spillway.InvalidArgumentError, match="finite|NaN"):
        tree.query(numpy.full((2, 3), numpy.nan), 3, device="cuda")


def test_a_tree_too_wide_for_a_warp_is_refused_on_every_machine_and_auto_runs_it_here():
    points = numpy.random.default_rng(2).random((5_000, 2))
    tree = SSTree(points, leaf_size=4, degree=200, build="hilbert")
    with pytest.raises(spillway.InvalidArgumentError, match="at most 128 children"):
        tree.query(numpy.zeros((1, 2)), 1, device="cuda")
    *found, stats = tree.query(points[:3], 2, device="auto", stats=True)
    assert stats["device"] == "cpu"
    assert_exact(tuple(found), oracle(points, points[:3], 2))


def test_an_unknown_device_is_refused():
    tree = SSTree(numpy.random.default_rng(2).random((100, 2)))
    with pytest.raises(spillway.InvalidArgumentError, match="unknown device 'gpu'|unknown device \"gpu\""):
        tree.query(numpy.zeros((1, 2)), 1, device="gpu")


@without_gpu
def test_without_a_gpu_cuda_says_why_and_auto_runs_on_the_cpu():
    assert isinstance(WHY, str) and WHY
    rng = numpy.random.default_rng(4)
    points = uniform(rng, 2_000, 3, numpy.float64)
    tree = SSTree(points)
    with pytest.raises(spillway.UnavailableError, match="CUDA|GPU") as raised:
        tree.query(points[:3], 2, device="cuda")
    assert isinstance(raised.value, RuntimeError)
    *found, stats = tree.query(points[:3], 2, device="auto", stats=True)
    assert stats["device"] == "cpu"
    assert_exact(tuple(found), oracle(points, points[:3], 2))
