"""What a GGUF file says of itself: the metadata at the head of a llama.cpp model file.

Only what `local:/path/to/model.gguf` needs is read: the architecture (`general.architecture`),
the model's name, and the context it was trained for (`<architecture>.context_length`). The
metadata is a list of typed key/value pairs before the tensors; values we do not need (the
tokenizer's vocabulary, tens of thousands of strings) are skipped without being kept.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from .._errors import UserError

__all__ = ["GGUFInfo", "read_gguf"]

_MAGIC = b"GGUF"
_FIXED = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
"""Byte sizes of the fixed-size value types (u8, i8, u16, i16, u32, i32, f32, bool, u64, i64, f64)."""
_INTEGERS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 10: "<Q", 11: "<q"}
_STRING, _ARRAY = 8, 9


@dataclass(frozen=True, kw_only=True, slots=True)
class GGUFInfo:
    path: Path
    architecture: str
    name: str
    context_length: int | None
    """The context the model was trained for, in tokens (None when the file does not say)."""


def read_gguf(path: Path) -> GGUFInfo:
    """The metadata of the GGUF file at `path`; `UserError` (one line) if it is not one."""
    if not path.is_file():
        raise UserError(f"no model file at {path}: give the path of a .gguf file, e.g. --model local:/models/qwen.gguf")
    try:
        with path.open("rb") as handle:
            return _read(handle, path)
    except OSError as exc:
        raise UserError(f"cannot read the model file {path}: {exc.strerror or exc}") from None
    except (struct.error, UnicodeDecodeError, _Bad) as exc:
        raise UserError(f"{path} is not a GGUF model file ({exc}): give a .gguf file made for llama.cpp") from None


class _Bad(Exception):
    pass


def _read(handle: BinaryIO, path: Path) -> GGUFInfo:
    if handle.read(4) != _MAGIC:
        raise _Bad("it does not start with GGUF")
    (version,) = struct.unpack("<I", _exactly(handle, 4))
    if version < 2:
        raise _Bad(f"version {version} is too old; convert it with a recent llama.cpp")
    _tensors, count = struct.unpack("<QQ", _exactly(handle, 16))
    if count > 1_000_000:
        raise _Bad(f"it claims {count:,} metadata entries")
    found: dict[str, object] = {}
    for _ in range(count):
        key = _string(handle)
        (kind,) = struct.unpack("<I", _exactly(handle, 4))
        wanted = key in ("general.architecture", "general.name") or key.endswith(".context_length")
        value = _value(handle, kind, keep=wanted)
        if wanted:
            found[key] = value
    architecture = found.get("general.architecture")
    if not isinstance(architecture, str):
        raise _Bad("its metadata names no general.architecture")
    length = found.get(f"{architecture}.context_length")
    name = found.get("general.name")
    return GGUFInfo(
        path=path,
        architecture=architecture,
        name=name if isinstance(name, str) and name else path.stem,
        context_length=length if isinstance(length, int) and length > 0 else None,
    )


def _exactly(handle: BinaryIO, size: int) -> bytes:
    data = handle.read(size)
    if len(data) != size:
        raise _Bad("it ends inside its metadata")
    return data


def _string(handle: BinaryIO) -> str:
    (size,) = struct.unpack("<Q", _exactly(handle, 8))
    if size > 1 << 24:
        raise _Bad(f"a metadata string claims {size:,} bytes")
    return _exactly(handle, size).decode("utf-8")


def _value(handle: BinaryIO, kind: int, *, keep: bool) -> object:
    """Read one value of type `kind`; give it back when `keep` and it is an integer or a string."""
    if kind == _STRING:
        text = _string(handle)
        return text if keep else None
    if kind == _ARRAY:
        item, count = struct.unpack("<IQ", _exactly(handle, 12))
        if item in _FIXED:
            handle.seek(_FIXED[item] * count, 1)
        else:
            for _ in range(count):
                _value(handle, item, keep=False)
        return None
    size = _FIXED.get(kind)
    if size is None:
        raise _Bad(f"unknown metadata type {kind}")
    data = _exactly(handle, size)
    return struct.unpack(_INTEGERS[kind], data)[0] if keep and kind in _INTEGERS else None
