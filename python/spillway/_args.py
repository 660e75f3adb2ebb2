"""Turning Python arguments into what the engines take, with errors that
name the parameter and what it allows (``InvalidArgumentError``, a
``ValueError``).

What is checked here is what cannot reach the engines: a size written as
text ("4G"), and a negative or out-of-range whole number, which the native
layer would otherwise reject with a bare ``OverflowError`` or ``TypeError``
that names no parameter.
"""

from __future__ import annotations

import operator
from typing import Any, Union

from .errors import InvalidArgumentError

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
U64_MAX = (1 << 64) - 1
# As spillway_core::THREADS_MAX: more is a typo, not a machine.
THREADS_MAX = 1024


def count(value: Any, parameter: str, low: int = 0, high: int = U64_MAX) -> int:
    """A whole number from ``low`` to ``high`` (``True`` and ``False`` are not numbers here)."""
    allowed = f"{parameter} must be a whole number from {low} to {high}"
    if isinstance(value, bool):
        raise InvalidArgumentError(f"{allowed}, not {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise InvalidArgumentError(f"{allowed}, not {type(value).__name__} {value!r}") from None
    if not low <= number <= high:
        raise InvalidArgumentError(f"{allowed}, not {number}")
    return number


def threads(value: Any, parameter: str = "threads") -> int:
    """A thread count: 0 (every core) to :data:`THREADS_MAX`."""
    return count(value, parameter, 0, THREADS_MAX)


def size(value: Union[int, str], parameter: str, low: int = 0, high: int = U64_MAX) -> int:
    """Bytes from ``low`` to ``high``, as a whole number or as text with a
    binary unit: "512M", "4G", "1GiB"."""
    allowed = f"{parameter} must be a size such as 512M or 4G, or a whole number of bytes, from {low} to {high}"
    if isinstance(value, str):
        text = value.strip().upper().removesuffix("IB").removesuffix("B")
        unit = text[-1:] if text[-1:] in _UNITS else ""
        number = text[: len(text) - len(unit)].strip()
        if not number.isdigit():
            raise InvalidArgumentError(f"{allowed}; not {value!r}")
        bytes_ = int(number) * _UNITS[unit]
    elif isinstance(value, bool):
        raise InvalidArgumentError(f"{allowed}; not {value!r}")
    else:
        try:
            bytes_ = operator.index(value)
        except TypeError:
            raise InvalidArgumentError(f"{allowed}; not {type(value).__name__} {value!r}") from None
    if not low <= bytes_ <= high:
        raise InvalidArgumentError(f"{allowed}; not {value!r}")
    return bytes_
