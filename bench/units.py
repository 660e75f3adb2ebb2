"""Sizes and counts as people write them (4G, 100M, 50k) and as reports show them."""

from __future__ import annotations

import argparse
import re


def parse_size(text: str) -> int:
    """'4G' -> 4 GiB, '100M', '64k', '12345' (bytes). Binary units."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(?:i?[bB])?\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (use e.g. 4G, 512M, 100k)")
    number, unit = match.groups()
    factor = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}[unit.lower()]
    return int(float(number) * factor)


def parse_count(text: str) -> int:
    """'10M' -> 10^7, '50k', '1e8', '12345': a count with a decimal suffix."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?(?:[eE]\d+)?)\s*([kKmMgG]?)\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a count: {text!r} (use e.g. 10M, 50k, 1e8)")
    number, unit = match.groups()
    return int(float(number) * {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}[unit.lower()])


def format_bytes(count: float) -> str:
    for unit, factor in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= factor:
            return f"{count / factor:.2f} {unit}"
    return f"{count:.0f} B"


def format_size_arg(size: int) -> str:
    """The shortest `--size` that parse_size reads back as `size`."""
    for suffix, factor in (("T", 2**40), ("G", 2**30), ("M", 2**20), ("k", 2**10)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{suffix}"
    return str(size)


def format_count(count: int) -> str:
    """10000000 -> '10M', 50000 -> '50k': the shortest decimal form parse_count reads back."""
    for suffix, factor in (("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if count >= factor and count % factor == 0:
            return f"{count // factor}{suffix}"
    return str(count)


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
