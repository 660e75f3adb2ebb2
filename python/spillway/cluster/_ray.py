"""Ray, or a clear error saying how to get it (the ``cluster`` extra)."""

from ..errors import SpillwayError

try:
    import ray
except ImportError:
    raise SpillwayError('spillway.cluster needs Ray: pip install "spillway[cluster]"') from None

__all__ = ["ray"]
