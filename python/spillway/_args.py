"""Turning Python arguments into what the engines take, with errors that
name the parameter (``InvalidArgumentError``, a ``ValueError``).

The engines check ranges and combinations themselves; what is checked here
is what cannot reach them: a size written as text ("4G"), and a negative or
non-integer count, which the native layer would otherwise reject with a bare
``OverflowError`` or ``TypeError`` that names no parameter.
"""

from __future__ import annotations

import operator
from typing import Any, Union

from .errors import InvalidArgumentError

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def count(value: Any, parameter: str, bits: int = 64) -> int:
    """A whole number from 0 to 2**bits - 1 (``True`` and ``False`` are not numbers here)."""
    if isinstance(value, bool):
        raise InvalidArgumentError(f"{parameter} must be a whole number, not {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise InvalidArgumentError(
            f"{parameter} must be a whole number, not {type(value).__name__} {value!r}"
        ) from None
    if not 0 <= number < 1 << bits:
        raise InvalidArgumentError(f"{parameter} must be from 0 to 2**{bits} - 1, not {number}")
    return number


def size(value: Union[int, str], parameter: str) -> int:
    """Bytes, as a whole number or as text with a binary unit: "512M", "4G", "1GiB"."""
    if not isinstance(value, str):
        return count(value, parameter)
    text = value.strip().upper().removesuffix("IB").removesuffix("B")
    unit = text[-1:] if text[-1:] in _UNITS else ""
    number = text[: len(text) - len(unit)].strip()
    if not number.isdigit():
        raise InvalidArgumentError(
            f"{parameter} must be a size in bytes such as 1048576, '512M' or '4G' "
            f"(units K, M, G, T, binary), not {value!r}"
        )
    return count(int(number) * _UNITS[unit], parameter)
