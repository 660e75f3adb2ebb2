"""Columns as the typed path takes them: NumPy, Arrow, pandas and Polars columns made flat buffers.

A key column becomes a :class:`KeyColumn`: 64-bit integers as one buffer,
text or bytes as Arrow lays them out (offsets, then the bytes), so no Python
object is made per row. Numbers are viewed where they already are 64-bit
(NumPy arrays, pandas and Polars numeric columns without nulls) and
converted once otherwise.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

from .errors import InvalidArgumentError

_INT_MAX = 2**63 - 1


class KeyColumn(NamedTuple):
    """A key column for the engine, which reads its memory in place: its type code, data and (byte strings)
    offsets, and its Python kind."""

    code: str  # "i8" or "bytes"
    data: Any  # a NumPy array of int64; for byte strings an Arrow buffer or bytes
    offsets: Optional[Any]  # byte strings: a NumPy array of uint64, n + 1
    kind: type  # int, str or bytes
    length: int


def _module(column: Any) -> str:
    return type(column).__module__.split(".")[0]


def is_column(column: Any) -> bool:
    """Whether ``column`` is a NumPy, Arrow, pandas or Polars column (not a list)."""
    return _module(column) in ("numpy", "pyarrow", "pandas", "polars") and hasattr(column, "__len__")


def is_column_list(columns: Any) -> bool:
    """Whether ``columns`` is a list or tuple of columns (of any kind, lists included)."""
    return (
        isinstance(columns, (list, tuple))
        and len(columns) > 0
        and all(hasattr(column, "__len__") and not isinstance(column, (str, bytes)) for column in columns)
    )


def _arrow(column: Any) -> Any:
    """An Arrow array of ``column``, one chunk."""
    import pyarrow

    if isinstance(column, pyarrow.ChunkedArray):
        return column.combine_chunks()
    if isinstance(column, pyarrow.Array):
        return column
    if _module(column) == "polars":
        return column.to_arrow()
    try:
        return pyarrow.array(column)
    except (pyarrow.ArrowException, TypeError, ValueError) as error:
        raise InvalidArgumentError(f"cannot read this column as numbers or text: {error}") from None


def _native(column: Any) -> Any:
    """``column`` as a NumPy array where it holds numbers (viewed, not copied, where it can be), else Arrow."""
    import numpy

    module = _module(column)
    if module == "numpy" and column.dtype.kind in "iuf":
        return column
    if module == "pandas" and isinstance(column.dtype, numpy.dtype) and column.dtype.kind in "iuf":
        return column.to_numpy()
    if module == "polars" and column.dtype.is_numeric() and column.null_count() == 0:
        return column.to_numpy()
    if module in ("numpy", "pandas", "polars", "pyarrow"):
        return _arrow(column)
    array = numpy.asarray(column)  # a list or another sequence
    return array if array.dtype.kind in "iuf" else _arrow(column)


def _numbers(arrow: Any, what: str) -> Any:
    """An Arrow array of numbers as NumPy, refusing nulls."""
    import pyarrow

    if arrow.null_count:
        position = arrow.is_null().index(True).as_py()
        raise InvalidArgumentError(
            f"{what}: at position {position} of the batch (counted from 0), a null; {what} must not be null"
        )
    if pyarrow.types.is_integer(arrow.type) or pyarrow.types.is_floating(arrow.type):
        return arrow.to_numpy(zero_copy_only=False)
    return None


def check_int_range(array: Any, what: str) -> None:
    """Unsigned 64-bit integers above the int64 range would wrap: refuse them."""
    import numpy

    if array.dtype.kind == "u" and array.dtype.itemsize == 8 and len(array) > 0:
        too_big = array > numpy.uint64(_INT_MAX)
        if too_big.any():
            position = int(numpy.argmax(too_big))
            raise InvalidArgumentError(
                f"{what}: at position {position} of the batch (counted from 0), {int(array[position])} is "
                f"outside the 64-bit signed range; {what} must fit int64 ({-(2**63)} to {_INT_MAX})"
            )


def key_column(column: Any, what: str = "keys") -> Optional[KeyColumn]:
    """``column`` as a key column of integers, text or bytes; None if it holds something else."""
    import numpy
    import pyarrow

    column = _native(column)
    if isinstance(column, pyarrow.Array):
        numbers = _numbers(column, what)
        if numbers is not None:
            column = numbers
        elif pyarrow.types.is_null(column.type) and len(column):
            _numbers(column, what)  # a column of nulls: refused
    if isinstance(column, numpy.ndarray):
        if column.dtype.kind not in "iu":
            return None
        check_int_range(column, what)
        data = numpy.ascontiguousarray(column, dtype="<i8")
        return KeyColumn("i8", data, None, int, len(data))
    if pyarrow.types.is_null(column.type):  # no rows, no type
        return KeyColumn("i8", numpy.zeros(0, dtype="<i8"), None, int, 0)
    for large, kind, test in (
        (False, str, pyarrow.types.is_string),
        (True, str, pyarrow.types.is_large_string),
        (False, bytes, pyarrow.types.is_binary),
        (True, bytes, pyarrow.types.is_large_binary),
    ):
        if test(column.type):
            _numbers(column, what)  # nulls refused
            _, offsets, data = column.buffers()
            width = numpy.int64 if large else numpy.int32
            offsets = numpy.frombuffer(offsets, dtype=width)[column.offset : column.offset + len(column) + 1]
            # A slice's bytes only, its offsets made to start at 0.
            first, last = int(offsets[0]), int(offsets[-1])
            return KeyColumn(
                "bytes",
                data.slice(first, last - first) if data is not None else b"",
                (offsets - first).astype("<u8"),
                kind,
                len(column),
            )
    return None


def number_column(column: Any, what: str = "values") -> Optional[Any]:
    """``column`` as a NumPy array of numbers; None if it holds something else."""
    import numpy
    import pyarrow

    column = _native(column)
    if isinstance(column, pyarrow.Array):
        column = _numbers(column, what)
    if isinstance(column, numpy.ndarray) and column.dtype.kind in "iuf":
        check_int_range(column, what)
        return column
    return None


def key_array(kind: type, code: str, data: bytes, offsets: Optional[bytes]) -> Any:
    """A result key column: NumPy for integers, Arrow for text and bytes."""
    import numpy

    if code in ("i8", "u8", "f8"):
        return numpy.frombuffer(data, dtype="<" + code)
    import pyarrow

    array_type = pyarrow.large_string() if kind is str else pyarrow.large_binary()
    count = len(offsets) // 8 - 1
    return pyarrow.Array.from_buffers(array_type, count, [None, pyarrow.py_buffer(offsets), pyarrow.py_buffer(data)])


def result_array(kind: str, data: bytes, valid: Optional[bytes]) -> Any:
    """A result column as NumPy: object arrays where there are nulls or integers wider than 64 bits."""
    import numpy

    if kind == "i16":
        wide = numpy.frombuffer(data, dtype=numpy.uint8).reshape(-1, 16)
        return numpy.array([int.from_bytes(row.tobytes(), "little", signed=True) for row in wide], dtype=object)
    array = numpy.frombuffer(data, dtype="<" + kind)
    if valid is not None:
        present = numpy.frombuffer(valid, dtype=numpy.uint8).astype(bool)
        if not present.all():
            array = array.astype(object)
            array[~present] = None
    return array
