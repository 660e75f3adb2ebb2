"""Exact k-nearest-neighbour search over an SS-tree (a tree of bounding spheres).

>>> import numpy
>>> from spillway.knn import SSTree
>>> points = numpy.random.default_rng(7).random((10_000, 8), dtype=numpy.float32)
>>> tree = SSTree(points, leaf_size=32)                         # doctest: +SKIP
>>> distances, indices = tree.query(points[:3], k=5)             # doctest: +SKIP
>>> indices[:, 0]                                                # doctest: +SKIP
array([0, 1, 2])

Every method (``"psb"``, ``"bnb"``, ``"brute"`` and ``"auto"``, which
picks one) returns what a float64 brute force returns, bit for bit: for
each query the ``k`` points with the smallest sum of squared coordinate
differences (summed in float64, dimension by dimension), ties broken by
the point's row, and as distances the square roots of those sums. The
index is built in Rust on every core, saved to and loaded from one
checksummed file, and queried in batches with the GIL released; Ctrl-C
stops a build or a batch with ``KeyboardInterrupt``. See ``docs/knn.md``.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Optional, Tuple, Union

from . import _native
from ._args import count, threads as thread_count
from .errors import InvalidArgumentError

PathLike = Union[str, "os.PathLike[str]"]

# NumPy dtype kinds that are real numbers: bools, signed and unsigned
# integers, floats. Complex numbers, objects, text, bytes and times are not
# coordinates.
_REAL_KINDS = "biuf"


def _numpy() -> Any:
    try:
        import numpy
    except ImportError as error:  # pragma: no cover - numpy is a dependency of the package
        raise ImportError("spillway.knn takes and returns NumPy arrays: pip install numpy") from error
    return numpy


def _real_array(values: Any, what: str) -> Any:
    """``values`` as a NumPy array of real numbers (not yet converted), or an error naming its dtype."""
    array = _numpy().asarray(values)
    if array.dtype.kind not in _REAL_KINDS:
        raise InvalidArgumentError(
            f"{what} must be real numbers (float32, float64 or integers), not an array of dtype {array.dtype}"
        )
    return array


def _points(values: Any) -> Tuple[Any, str]:
    """The points as a C-contiguous little-endian array and the dtype the engine stores them as.

    float32 stays float32 (half the memory, and each coordinate is widened
    to float64 exactly for every distance); every other real dtype becomes
    float64.
    """
    array = _real_array(values, "points")
    if array.ndim != 2:
        raise InvalidArgumentError(
            f"points must be a 2-D array (one row per point, one column per dimension), not of shape {array.shape}"
        )
    if array.dtype.kind == "f" and array.dtype.itemsize == 4:
        return _numpy().ascontiguousarray(array, dtype="<f4"), "f4"
    return _numpy().ascontiguousarray(array, dtype="<f8"), "f8"


def _text(value: Any, parameter: str, example: str) -> str:
    """A name, which the engine checks (pyo3 would only say it is not a str)."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{parameter} must be a name such as {example!r}, not {value!r}")
    return value


class SSTree:
    """An SS-tree over ``points`` (a 2-D array: one row per point), built bottom-up.

    ``points`` is anything ``numpy.asarray`` takes. float32 points are
    stored as float32; any other real dtype (float64, float16, integers,
    bools) is converted to float64. Coordinates must be finite; a NaN or an
    infinity is an :class:`spillway.InvalidArgumentError` naming its row and
    column. The tree keeps its own copy of the points: the array may change
    afterwards.

    Options (keyword-only):

    - ``leaf_size`` (64): points per leaf;
    - ``degree`` (32): children per internal node;
    - ``build`` (``"kmeans"``): how points are grouped into leaves and
      leaves into nodes: ``"kmeans"`` clusters them (fewer nodes visited
      per query), ``"hilbert"`` packs them in Hilbert-curve order (a
      faster build);
    - ``seed`` (42): the k-means seeding's seed; the same points, options
      and seed build the same tree;
    - ``threads`` (0): worker threads, 0 for every core.
    """

    def __init__(
        self,
        points: Any,
        *,
        leaf_size: int = 64,
        degree: int = 32,
        build: str = "kmeans",
        seed: int = 42,
        threads: int = 0,
    ) -> None:
        array, dtype = _points(points)
        self._native = _native.SSTree(
            array.tobytes(),
            array.shape[1],
            dtype,
            count(leaf_size, "leaf_size"),
            count(degree, "degree"),
            _text(build, "build", "kmeans"),
            count(seed, "seed"),
            thread_count(threads),
        )

    @classmethod
    def load(cls, path: PathLike) -> "SSTree":
        """Reads a tree :meth:`save` wrote.

        Every checksum and invariant is checked: a damaged file, or one
        that is not a saved tree, raises :class:`spillway.CorruptionError`
        naming it and the offset of what is wrong.
        """
        tree = cls.__new__(cls)
        tree._native = _native.SSTree.load(os.fspath(path))
        return tree

    def save(self, path: PathLike) -> None:
        """Writes the tree to ``path`` as one checksummed file, atomically and durably: a crash leaves
        the old file or the new one, never a mix."""
        self._native.save(os.fspath(path))

    def query(
        self,
        queries: Any,
        k: int,
        *,
        method: str = "auto",
        threads: int = 0,
        device: str = "cpu",
        stats: bool = False,
    ) -> Any:
        """The ``k`` nearest points to each query.

        ``queries`` is a 2-D array with one row of :attr:`dims` coordinates
        per query (any real dtype, widened to float64), or a 1-D array of
        :attr:`dims` coordinates for a single query. Returns ``(distances,
        indices)``: a float64 and an int64 array of shape ``(queries, k)``,
        row ``i`` holding query ``i``'s neighbours nearest first, ties by
        the point's row (its index in ``points``). With ``stats=True`` a
        third value is what the batch did: ``{queries, k, method, device,
        nodes_visited, leaves_scanned, distances_computed, warp_efficiency,
        kernel_s, query_s}`` (``method`` is the one ``"auto"`` picked,
        ``device`` where it ran; on the GPU ``warp_efficiency`` is the share
        of busy lanes in the PSB kernel's steps and ``kernel_s`` the
        seconds its kernels ran, both ``None`` on the CPU).

        ``method``: ``"auto"``, ``"psb"`` (Parallel Scan and Backtrack),
        ``"bnb"`` (branch and bound, CPU only) or ``"brute"``; every one
        gives the same answer. ``k`` must be from 1 to ``len(self)``.

        ``device``: ``"cpu"`` (every core, or ``threads``), ``"cuda"`` (GPU
        0: the tree is copied to it on the first such query and kept; an
        :class:`spillway.UnavailableError` says why when no GPU can be used
        here) or ``"auto"`` (the GPU when one can be used, else the CPU).
        The answer is the same, bit for bit, on every device.
        """
        numpy = _numpy()
        array = _real_array(queries, "queries")
        dims = self.dims
        if array.ndim == 1:
            if array.shape[0] != dims:
                raise InvalidArgumentError(
                    f"a single query (a 1-D array) must have {dims} coordinates, as the points do, "
                    f"not {array.shape[0]}"
                )
            array = array.reshape(1, dims)
        elif array.ndim != 2:
            raise InvalidArgumentError(
                f"queries must be a 2-D array (one row per query) or one query as a 1-D array, "
                f"not of shape {array.shape}"
            )
        elif array.shape[1] != dims:
            raise InvalidArgumentError(
                f"queries have {array.shape[1]} coordinates each, the points {dims}"
            )
        k = count(k, "k")
        distances, indices, report = self._native.query(
            numpy.ascontiguousarray(array, dtype="<f8").tobytes(),
            k,
            _text(method, "method", "auto"),
            thread_count(threads),
            _text(device, "device", "cpu"),
        )
        rows = array.shape[0]
        found = (
            numpy.frombuffer(distances, dtype="<f8").reshape(rows, k),
            numpy.frombuffer(indices, dtype="<i8").reshape(rows, k),
        )
        if stats:
            return (*found, json.loads(report))
        return found

    def stats(self) -> Dict[str, Any]:
        """The tree's shape and build cost: ``{points, dims, dtype, build, leaf_size, degree, leaves, nodes,
        levels, leaf_fill, bytes, build_s}`` (``build_s`` is 0 for a loaded tree)."""
        return json.loads(self._native.stats())

    def verify(self) -> None:
        """Checks every structural and geometric invariant of the tree (every point inside its leaf's
        sphere, every child's sphere inside its parent's, ...); raises an error naming the first that
        fails. A loaded tree has passed these checks already."""
        self._native.verify()

    @property
    def dims(self) -> int:
        """Coordinates per point."""
        return self._native.dims

    @property
    def dtype(self) -> str:
        """``"f32"`` or ``"f64"``: how the points are stored."""
        return self._native.dtype

    def __len__(self) -> int:
        return len(self._native)

    def __repr__(self) -> str:
        return f"SSTree({len(self)} points, {self.dims} dims, {self.dtype})"


def gpu_unavailable() -> Optional[str]:
    """``None`` when a GPU can be used here (``device="cuda"``), else the reason it cannot: no CUDA
    driver, or no GPU. Cheap: nothing is compiled or copied."""
    return _native.gpu_unavailable()


__all__ = ["SSTree", "gpu_unavailable"]
