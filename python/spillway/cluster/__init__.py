"""Spillway on a cluster, with Ray as the engine (EclipseMR's inner ring).

- :func:`local` starts a simulated cluster of several Ray nodes on this
  machine, in a private network namespace (see :mod:`.network`);
  :func:`connect` joins an existing Ray cluster.
- :class:`Cluster` is the cluster's file system, a consistent-hash ring of
  replicated blocks (:mod:`.ring`, :mod:`.store`, :mod:`.fs`).

``pip install "spillway[cluster]"`` brings Ray. See ``docs/cluster.md`` and
``python/spillway/cluster/DESIGN.md``.
"""

from .ring import Ring

__all__ = ["Cluster", "FileStat", "Ring", "connect", "local"]


def __getattr__(name):
    # Ray is imported on first use, so the ring, the stores and the network
    # checks work without it.
    if name in ("Cluster", "FileStat", "connect", "local"):
        from . import cluster

        return getattr(cluster, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
