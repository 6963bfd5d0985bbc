"""``ir.serialize`` / ``ir.deserialize``: an IR node as bytes, and back.

Any node of the IR serializes: a :class:`~pypto_async.ir.Program`, a
:class:`~pypto_async.ir.Function` (``pl.parse``'s result, one of
``Program.functions``), a statement, an expression, a type or a parameter.
``deserialize(serialize(x)) == x`` (the structural equality of the IR's
dataclasses, which leaves out source locations), and the locations come back
too; an object referenced twice is written once and comes back as one object
(a function's ``program``, shared with its siblings, stays shared).

The bytes are UTF-8 JSON after a magic line (PyPTO writes MessagePack; the
bytes are opaque in its API as here).  Reading builds only the IR's own
classes, named in the data and looked up in a fixed table: nothing else is
imported or called, so reading untrusted bytes runs no code.  Bytes that are
not this format, or name a class outside the table, raise
:class:`~pypto_async.errors.PtoArgumentError` (a ``ValueError``).
"""

from __future__ import annotations

import dataclasses
import enum
import json
from pathlib import Path

from .._dtypes import DataType, as_dtype
from ..errors import PtoArgumentError
from . import _function, _nodes, _program

__all__ = ["serialize", "deserialize", "serialize_to_file", "deserialize_from_file"]

_MAGIC = b"pypto_async-ir 1\n"


def _table() -> dict[str, type]:
    out = {}
    for mod in (_nodes, _function, _program):
        for name in getattr(mod, "__all__", ()):
            obj = getattr(mod, name, None)
            if isinstance(obj, type) and (dataclasses.is_dataclass(obj) or issubclass(obj, enum.Enum)):
                out[obj.__name__] = obj
    for obj in vars(_nodes).values():  # the node classes _nodes does not export
        if isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == _nodes.__name__:
            out.setdefault(obj.__name__, obj)
    return out


_CLASSES: dict[str, type] | None = None


def _classes() -> dict[str, type]:
    global _CLASSES
    if _CLASSES is None:
        _CLASSES = _table()
    return _CLASSES


class _Writer:
    def __init__(self):
        self.objects: list = []  # each shared object once, referenced by index
        self.index: dict[int, int] = {}
        self.keep: list = []  # the objects indexed, alive until the write ends (ids stay unique)

    def value(self, x):
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        if isinstance(x, DataType):
            return {"dtype": x.name}
        if isinstance(x, enum.Enum):
            cls = type(x)
            if _classes().get(cls.__name__) is not cls:
                raise PtoArgumentError(f"ir.serialize: {cls.__name__}.{x.name} is not a value of the IR")
            return {"enum": cls.__name__, "name": x.name}
        if isinstance(x, (tuple, list)):
            return {"tuple": [self.value(v) for v in x]} if isinstance(x, tuple) else [self.value(v) for v in x]
        if isinstance(x, dict):
            return {"dict": [[self.value(k), self.value(v)] for k, v in x.items()]}
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            cls = type(x)
            if _classes().get(cls.__name__) is not cls:
                raise PtoArgumentError(f"ir.serialize: a {cls.__name__} is not a node of the IR")
            ref = self.index.get(id(x))
            if ref is None:
                ref = len(self.objects)
                self.index[id(x)] = ref
                self.keep.append(x)
                self.objects.append(None)
                fields = {f.name: self.value(getattr(x, f.name)) for f in dataclasses.fields(x)}
                self.objects[ref] = {"class": cls.__name__, "fields": fields}
            return {"ref": ref}
        raise PtoArgumentError(f"ir.serialize: cannot serialize a {type(x).__name__} ({x!r})")


def serialize(node) -> bytes:
    """Return ``node`` (any IR node: a Program, a Function, a statement, ...) as bytes.

    Raises
    ------
    PtoArgumentError
        If ``node`` is not a node of the IR, or holds a value that is not.
    """
    w = _Writer()
    root = w.value(node)
    body = json.dumps({"root": root, "objects": w.objects}, separators=(",", ":"), allow_nan=True)
    return _MAGIC + body.encode()


class _Reader:
    def __init__(self, objects: list):
        self.objects = objects
        self.done: dict[int, object] = {}
        self.active: set[int] = set()

    def value(self, x):
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        if isinstance(x, list):
            return [self.value(v) for v in x]
        if not isinstance(x, dict) or len(x) > 2:
            raise ValueError(f"not a serialized value: {x!r:.80}")
        if "tuple" in x:
            return tuple(self.value(v) for v in x["tuple"])
        if "dict" in x:
            return {self.value(k): self.value(v) for k, v in x["dict"]}
        if "dtype" in x:
            return as_dtype(x["dtype"])
        if "enum" in x:
            cls = _classes().get(x["enum"])
            if cls is None or not issubclass(cls, enum.Enum):
                raise ValueError(f"{x['enum']!r} is not an enum of the IR")
            return cls[x["name"]]
        if "ref" in x:
            return self.node(x["ref"])
        raise ValueError(f"not a serialized value: {x!r:.80}")

    def node(self, ref):
        if not isinstance(ref, int) or not 0 <= ref < len(self.objects):
            raise ValueError(f"reference {ref!r} is out of range")
        if ref in self.done:
            return self.done[ref]
        if ref in self.active:
            raise ValueError(f"object {ref} contains itself")
        self.active.add(ref)
        entry = self.objects[ref]
        cls = _classes().get(entry.get("class")) if isinstance(entry, dict) else None
        if cls is None or not dataclasses.is_dataclass(cls):
            raise ValueError(f"object {ref} names no class of the IR: {entry!r:.80}")
        names = {f.name for f in dataclasses.fields(cls)}
        fields = entry.get("fields")
        if not isinstance(fields, dict) or not set(fields) <= names:
            raise ValueError(f"object {ref}: fields {sorted(fields or ())} do not fit {cls.__name__}")
        out = cls(**{k: self.value(v) for k, v in fields.items()})
        self.active.discard(ref)
        self.done[ref] = out
        return out


def deserialize(data: bytes):
    """Return the IR node :func:`serialize` wrote as ``data``.

    Raises
    ------
    PtoArgumentError
        If ``data`` is not bytes :func:`serialize` wrote (the message says what is wrong).
    """
    if isinstance(data, (bytearray, memoryview)):
        data = bytes(data)
    if not isinstance(data, bytes):
        raise PtoArgumentError(f"ir.deserialize takes bytes, got {type(data).__name__}")
    if not data.startswith(_MAGIC):
        raise PtoArgumentError("ir.deserialize: the data is not a serialized pypto_async IR node "
                               f"(it starts {data[:24]!r})")
    try:
        doc = json.loads(data[len(_MAGIC):].decode())
        reader = _Reader(doc["objects"])
        return reader.value(doc["root"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, RecursionError) as exc:
        raise PtoArgumentError(f"ir.deserialize: the data is corrupt: {exc}") from None


def serialize_to_file(node, path) -> None:
    """Write :func:`serialize`'s bytes for ``node`` to the file at ``path``."""
    Path(path).write_bytes(serialize(node))


def deserialize_from_file(path):
    """Return the IR node the file at ``path`` holds (written by :func:`serialize_to_file`)."""
    return deserialize(Path(path).read_bytes())
