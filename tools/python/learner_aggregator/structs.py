"""Plain Python values to and from google.protobuf Struct, Value and ListValue.

Structs hold JSON-like data: dicts with string keys, lists, floats, strings, bools and
None. Numbers always come back as floats (a Value stores a double). Going in, ints,
numpy scalars and numpy arrays (as nested lists) are accepted too.

Every sample's meta goes through here both ways, so the common kinds (str, float, int,
bool by exact type) are tried first, before the isinstance checks against abstract
classes (numbers.Real, Mapping, Sequence), which cost several times more.
"""

from __future__ import annotations

import numbers
import struct as _binary  # not `struct`: the functions here name their Structs so
from typing import Any, Dict, List, Mapping, Optional, Sequence

from google.protobuf import struct_pb2


def fill_value(value: struct_pb2.Value, obj: Any) -> None:
    """Sets `value` to the protobuf form of `obj`; TypeError for what JSON cannot hold."""
    kind = type(obj)
    if kind is str:
        value.string_value = obj
    elif kind is float or kind is int:
        value.number_value = obj
    elif kind is bool:
        value.bool_value = obj
    else:
        _fill_value_slow(value, obj)


def _fill_value_slow(value: struct_pb2.Value, obj: Any) -> None:
    if obj is None:
        value.null_value = struct_pb2.NULL_VALUE
    elif isinstance(obj, bool):
        value.bool_value = obj
    elif isinstance(obj, numbers.Real):  # int, float, numpy scalars
        value.number_value = float(obj)
    elif isinstance(obj, str):
        value.string_value = obj
    elif isinstance(obj, Mapping):
        fill_struct(value.struct_value, obj)
    elif hasattr(obj, "tolist") and not isinstance(obj, (bytes, bytearray)):
        fill_value(value, obj.tolist())  # numpy arrays and scalars, torch tensors
    elif isinstance(obj, Sequence) and not isinstance(obj, (bytes, bytearray)):
        fill_list(value.list_value, obj)
    else:
        raise TypeError(f"cannot put a {type(obj).__name__} into a protobuf Value")


def fill_struct(struct: struct_pb2.Struct, obj: Mapping[str, Any]) -> None:
    """Sets `struct` to the protobuf form of the mapping `obj` (string keys)."""
    if struct.fields:
        struct.Clear()
    fields = struct.fields
    for key, item in obj.items():
        if type(key) is not str and not isinstance(key, str):
            raise TypeError(f"a Struct key must be a string, not {type(key).__name__}")
        # fill_value inlined for the common kinds: this loop runs for every sample.
        kind = type(item)
        if kind is str:
            fields[key].string_value = item
        elif kind is float or kind is int:
            fields[key].number_value = item
        else:
            fill_value(fields[key], item)


def fill_list(list_value: struct_pb2.ListValue, items: Sequence[Any]) -> None:
    """Sets `list_value` to the protobuf form of `items`."""
    list_value.Clear()
    for item in items:
        fill_value(list_value.values.add(), item)


def to_struct(obj: Optional[Mapping[str, Any]]) -> struct_pb2.Struct:
    """A new Struct holding `obj` (None: an empty one)."""
    struct = struct_pb2.Struct()
    if obj is not None:
        fill_struct(struct, obj)
    return struct


def to_value(obj: Any) -> struct_pb2.Value:
    """A new Value holding `obj`."""
    value = struct_pb2.Value()
    fill_value(value, obj)
    return value


def from_value(value: struct_pb2.Value) -> Any:
    """The plain Python form of a Value (an unset one is None)."""
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        return value.string_value
    if kind == "number_value":
        return value.number_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "struct_value":
        return from_struct(value.struct_value)
    if kind == "list_value":
        return from_list(value.list_value)
    return None


def from_struct(struct: struct_pb2.Struct) -> Dict[str, Any]:
    """The plain dict form of a Struct."""
    # Not fields.items(): a protobuf map's items() is collections.abc's generator over
    # the keys, looking each up again; keys and lookups here are the runtime's own.
    fields = struct.fields
    out: Dict[str, Any] = {}
    for key in fields:
        value = fields[key]
        # from_value inlined for the common kinds: this runs for every sample.
        kind = value.WhichOneof("kind")
        if kind == "string_value":
            out[key] = value.string_value
        elif kind == "number_value":
            out[key] = value.number_value
        else:
            out[key] = from_value(value)
    return out


def from_list(list_value: struct_pb2.ListValue) -> List[Any]:
    """The plain list form of a ListValue."""
    return [from_value(item) for item in list_value.values]


_unpack_double = _binary.Struct("<d").unpack_from


class _NotSimple(Exception):
    """A serialized Struct that from_struct_bytes leaves to protobuf."""


def from_struct_bytes(buffer: bytes) -> Dict[str, Any]:
    """The plain dict form of a serialized Struct (a sample's meta as it came).

    Read here directly when it is laid out as protobuf writes small Structs of strings,
    numbers, bools and nulls (lengths under 128): a third of the time of parsing it into
    a message and converting that. Anything else is parsed by protobuf (and its
    DecodeError raised), so the result is always what from_struct would give."""
    out: Dict[str, Any] = {}
    i = 0
    size = len(buffer)
    try:
        while i < size:
            # An entry (fields = 1): its key (1), then its Value (2) up to `end`.
            if buffer[i] != 0x0A or buffer[i + 1] >= 0x80 or buffer[i + 2] != 0x0A:
                raise _NotSimple()
            end = i + 2 + buffer[i + 1]
            length = buffer[i + 3]
            if end > size or length >= 0x80:
                raise _NotSimple()
            i += 4
            key = buffer[i:i + length].decode()
            i += length
            if buffer[i] != 0x12 or buffer[i + 1] != end - i - 2:
                raise _NotSimple()
            i += 2
            kind = buffer[i]
            if kind == 0x1A and buffer[i + 1] == end - i - 2:  # string_value
                out[key] = buffer[i + 2:end].decode()
            elif kind == 0x11 and end - i == 9:  # number_value
                out[key] = _unpack_double(buffer, i + 1)[0]
            elif kind == 0x20 and end - i == 2 and buffer[i + 1] < 2:  # bool_value
                out[key] = buffer[i + 1] == 1
            elif kind == 0x08 and end - i == 2 and buffer[i + 1] == 0:  # null_value
                out[key] = None
            else:
                raise _NotSimple()
            i = end
    except (_NotSimple, IndexError, UnicodeDecodeError):
        return from_struct(_parse_struct(buffer))
    return out


def _parse_struct(buffer: bytes) -> struct_pb2.Struct:
    """A serialized Struct parsed as the field of a message (a Value's struct_value), as
    it came: parsed alone, protobuf only warns of a stray end-group tag and stops."""
    length = len(buffer)
    prefix = bytearray(b"\x2a")  # struct_value = 5, then the length as a varint
    while length >= 0x80:
        prefix.append((length & 0x7F) | 0x80)
        length >>= 7
    prefix.append(length)
    return struct_pb2.Value.FromString(bytes(prefix) + buffer).struct_value
