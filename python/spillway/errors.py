"""Exceptions raised by Spillway, one class per kind of error.

Every class derives from :class:`SpillwayError`; those with a natural
built-in counterpart also derive from it, so ``except ValueError`` or
``except OSError`` keep working.
"""


class SpillwayError(Exception):
    """Base class of every error Spillway raises."""


class InvalidArgumentError(SpillwayError, ValueError):
    """A bad option or a malformed input file."""


class CorruptionError(SpillwayError):
    """Data on disk failed a checksum or structural check."""


class SpillwayIOError(SpillwayError, OSError):
    """The operating system refused an I/O operation (``errno`` is set)."""


class ResourcesExhaustedError(SpillwayError, MemoryError):
    """A configured or physical limit was reached."""


class PoisonedError(SpillwayError):
    """A durable write failed earlier; reopen the store to recover."""


class UnavailableError(SpillwayError, RuntimeError):
    """Something the call needs is missing on this machine (a GPU, its driver or its libraries)."""


class InternalError(SpillwayError):
    """A broken invariant: a bug in Spillway. Please report it."""


__all__ = [
    "SpillwayError",
    "InvalidArgumentError",
    "CorruptionError",
    "SpillwayIOError",
    "ResourcesExhaustedError",
    "PoisonedError",
    "UnavailableError",
    "InternalError",
]
