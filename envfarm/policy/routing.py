"""Routed experts (MoE router replay data) from the forms servers send, bytes unaltered.

- SGLang: base64 of a flat int32 array, kept verbatim (shape ``[n]``).
- vLLM, earlier releases: nested lists ``[tokens - 1][layers][top_k]``, packed as int32.
- vLLM, later releases: a base64 ``.npy`` file; its header gives shape and dtype (uint8,
  uint16 or int32) and its array bytes are kept exactly, without the header.

A form that cannot be read exactly is reported through ``fault`` and yields None.
"""

from __future__ import annotations

import ast
import base64
import binascii
import math
import struct
import sys
from array import array
from collections.abc import Callable
from typing import Any

from envfarm.models.trajectory import IntDType, RoutedExperts

_NPY_DTYPES: dict[str, tuple[IntDType, int]] = {
    "<i2": ("int16", 2),
    "<i4": ("int32", 4),
    "<i8": ("int64", 8),
    "|u1": ("uint8", 1),
    "<u1": ("uint8", 1),
    "<u2": ("uint16", 2),
    "<u4": ("uint32", 4),
}


def decode_base64(text: str, fault: Callable[[str], None]) -> bytes | None:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        fault("routed_experts is not valid base64")
        return None


def from_nested(value: list[Any], fault: Callable[[str], None]) -> RoutedExperts | None:
    """Nested integer lists to int32 bytes; only a rectangular array of int32 values passes."""
    shape: list[int] = []
    probe: Any = value
    while isinstance(probe, list):
        shape.append(len(probe))
        if not probe:
            break
        probe = probe[0]
    flat: list[Any] = value
    for _ in shape[1:]:
        if not all(isinstance(row, list) for row in flat):
            flat = []
            break
        flat = [item for row in flat for item in row]
    expected = math.prod(shape)
    if len(flat) != expected or not all(type(v) is int for v in flat):
        fault(f"routed_experts is not a rectangular integer array of shape {shape}")
        return None
    try:
        packed = array("i", flat)
    except OverflowError:
        fault("routed_experts has a value outside int32")
        return None
    if packed.itemsize != 4:  # pragma: no cover - C int is 32 bits on every supported platform
        packed = array("l", flat)
    if sys.byteorder == "big":  # pragma: no cover
        packed.byteswap()
    return RoutedExperts(shape=shape, dtype="int32", data=base64.b64encode(packed).decode())


def from_npy(text: str, fault: Callable[[str], None]) -> RoutedExperts | None:
    """A base64 ``.npy`` file to its header's shape and dtype and its array bytes, unchanged."""
    raw = decode_base64(text, fault)
    if raw is None:
        return None
    if raw[:6] != b"\x93NUMPY" or len(raw) < 10:
        fault("routed_experts is a string but not a base64 .npy file")
        return None
    if raw[6] == 1:
        (size,), start = struct.unpack("<H", raw[8:10]), 10
    else:
        (size,), start = struct.unpack("<I", raw[8:12]), 12
    try:
        header = ast.literal_eval(raw[start : start + size].decode("latin1"))
        descr, fortran, shape = header["descr"], header["fortran_order"], list(header["shape"])
    except (ValueError, SyntaxError, KeyError, TypeError):
        fault("routed_experts .npy header is unreadable")
        return None
    if descr not in _NPY_DTYPES or fortran:
        order = "Fortran" if fortran else "C"
        fault(
            f"routed_experts .npy has dtype {descr!r} in {order} order; expected a "
            "little-endian integer array in C order"
        )
        return None
    dtype, itemsize = _NPY_DTYPES[descr]
    payload = raw[start + size :]
    if len(payload) != math.prod(shape) * itemsize:
        fault(f"routed_experts .npy holds {len(payload)} bytes, not {shape} of {dtype}")
        return None
    return RoutedExperts(shape=shape, dtype=dtype, data=base64.b64encode(payload).decode())
