"""A LearnRequest's samples to and from its bytes without protobuf message objects.

Learn is the hot path, and most of its time in the SDK went into protobuf objects: 64
samples with two meta keys took the client 0.12 ms to build as messages (a Struct map
per sample) and 0.04 ms to serialize, and the learner 0.04 ms to parse and 0.14 ms to
turn back into dicts. Here the client writes the bytes directly from the Python values
(encode_sample), and the learner reads the samples' spans straight from the request's
bytes (decode_learn_request), leaving each meta in its bytes until a learner reads it
(Sample.meta decodes at first read).

Both sides take the fast way only for what they know exactly, and leave everything
else to protobuf, so results and errors are protobuf's: the client a sample whose data
is not bytes, whose meta is not a dict or holds values other than str, float, int and
bool (per value: a Value message); the learner any layout other than the canonical one
(data, then meta, once each), which a protobuf parse of the whole request then checks.
"""

from __future__ import annotations

import struct
from typing import Any, Dict, List, Optional, Tuple

from learner_aggregator._proto import learner_pb2
from learner_aggregator.samples import Sample
from learner_aggregator.structs import fill_struct, from_struct, to_value

# Single-byte varints, the length of nearly every field here.
_VARINTS = [bytes((n,)) for n in range(128)]
_pack_double = struct.Struct("<d").pack


def _varint(n: int) -> bytes:
    if n < 128:
        return _VARINTS[n]
    out = bytearray()
    while n >= 128:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


# Per key, the bytes of a Struct entry (fields = 1) up to its value: the key's field
# (1), and for a number, everything but the double itself. A batch repeats the same few
# keys in every sample; bounded, so metas keyed by ids cannot grow them forever.
_keys: Dict[str, bytes] = {}
_number_heads: Dict[str, bytes] = {}
_MAX_KEYS = 4096


def _key(key: str) -> Optional[bytes]:
    """The entry's key field for `key`; None when it is not a str."""
    prefix = _keys.get(key)
    if prefix is None:
        if type(key) is not str:
            return None
        name = key.encode()
        prefix = b"\x0a" + _varint(len(name)) + name
        if len(_keys) < _MAX_KEYS:
            _keys[key] = prefix
    return prefix


def _number_head(key: str) -> Optional[bytes]:
    """A number entry's bytes before its double: entry tag and length, the key, the
    value's tag and length (9) and number_value's tag (2, a double)."""
    head = _number_heads.get(key)
    if head is None:
        prefix = _key(key)
        if prefix is None:
            return None
        head = b"\x0a" + _varint(len(prefix) + 11) + prefix + b"\x12\x09\x11"
        if len(_number_heads) < _MAX_KEYS:
            _number_heads[key] = head
    return head


def _value(obj: Any) -> bytes:
    """A google.protobuf.Value holding `obj`, serialized."""
    kind = type(obj)
    if kind is str:
        text: bytes = obj.encode()
        return b"\x1a" + _varint(len(text)) + text  # string_value = 3
    if kind is float or kind is int:
        number: bytes = _pack_double(obj)
        return b"\x11" + number  # number_value = 2 (double)
    if kind is bool:
        return b"\x20\x01" if obj else b"\x20\x00"  # bool_value = 4
    # None, containers, numpy, ...: as protobuf has them (TypeError for the rest, as before).
    serialized: bytes = to_value(obj).SerializeToString()
    return serialized


def _struct(meta: Dict[str, Any]) -> Optional[bytes]:
    """A Struct holding `meta`, serialized; None when a key is not a str."""
    parts: List[bytes] = []
    append = parts.append
    for key, item in meta.items():
        kind = type(item)
        if kind is float or kind is int:  # the commonest, from cached bytes
            head = _number_heads.get(key) or _number_head(key)
            if head is None:
                return None
            append(head)
            append(_pack_double(item))
            continue
        prefix = _keys.get(key) or _key(key)
        if prefix is None:
            return None
        if kind is str:
            text = item.encode()
            size = len(text)
            entry_size = len(prefix) + size + 4
            if entry_size < 0x80:  # every length one byte: the next commonest, inline
                append(b"".join((b"\x0a", _VARINTS[entry_size], prefix, b"\x12",
                                 _VARINTS[size + 2], b"\x1a", _VARINTS[size], text)))
                continue
        value = _value(item)
        entry = prefix + b"\x12" + _varint(len(value)) + value
        append(b"\x0a" + _varint(len(entry)) + entry)
    return b"".join(parts)


def encode_sample(sample: Sample) -> bytes:
    """`sample` as one entry of LearnRequest.samples (field 1: tag, length, Sample)."""
    data, meta = sample.data, sample.meta
    if type(data) is bytes and type(meta) is dict:
        try:
            encoded = _struct(meta) if meta else b""
        except (struct.error, OverflowError):  # an int no double holds: protobuf says so
            encoded = None
        if encoded is not None:
            data_size, meta_size = len(data), len(encoded)
            sample_size = data_size + meta_size + 4  # with both fields' tags and lengths
            if data_size and meta_size and sample_size < 0x80:  # the common small sample
                return b"".join((b"\x0a", _VARINTS[sample_size], b"\x0a", _VARINTS[data_size],
                                 data, b"\x12", _VARINTS[meta_size], encoded))
            fields = b"\x0a" + _varint(data_size) + data if data_size else b""  # data = 1
            if meta:
                fields += b"\x12" + _varint(meta_size) + encoded  # meta = 2
            return b"\x0a" + _varint(len(fields)) + fields
    # Anything else as protobuf takes it (or refuses it).
    message = learner_pb2.Sample(data=data)
    fill_struct(message.meta, meta)
    serialized: bytes = message.SerializeToString()
    return b"\x0a" + _varint(len(serialized)) + serialized


def encode_plan_id(plan_id: str) -> bytes:
    """LearnRequest.plan_id (field 2) as its bytes; none for the empty string."""
    if not plan_id:
        return b""
    text = plan_id.encode()
    return b"\x12" + _varint(len(text)) + text


class _NotCanonical(Exception):
    """The bytes are not laid out as decode_learn_request's fast way reads them."""


def _read_varint(buffer: bytes, i: int) -> Tuple[int, int]:
    """The varint at buffer[i] and the index after it."""
    n = 0
    shift = 0
    while True:
        if i >= len(buffer) or shift > 63:
            raise _NotCanonical()
        byte = buffer[i]
        i += 1
        n |= (byte & 0x7F) << shift
        if byte < 0x80:
            return n, i
        shift += 7


def decode_learn_request(buffer: bytes) -> Tuple[List[Sample], learner_pb2.LearnRequest]:
    """A serialized LearnRequest's samples, and the request with its other fields
    (plan_id, membership) and no samples. DecodeError as protobuf's parse when the
    bytes are not a LearnRequest."""
    try:
        return _decode_canonical(buffer)
    except _NotCanonical:
        pass
    request = learner_pb2.LearnRequest.FromString(buffer)
    samples = [Sample(s.data, from_struct(s.meta)) for s in request.samples]
    del request.samples[:]
    return samples, request


def _decode_canonical(buffer: bytes) -> Tuple[List[Sample], learner_pb2.LearnRequest]:
    try:
        return _decode_fields(buffer)
    except IndexError:  # a length or a tag past the end
        raise _NotCanonical() from None


def _decode_fields(buffer: bytes) -> Tuple[List[Sample], learner_pb2.LearnRequest]:
    # One loop, lengths under 128 read inline: it runs for every sample.
    samples: List[Sample] = []
    others = []  # the other fields' bytes, parsed by protobuf (merging as it does)
    new_sample = Sample.__new__
    i = 0
    size = len(buffer)
    while i < size:
        start = i
        key = buffer[i]
        if key >= 0x80 or key & 7 != 2:  # all of a LearnRequest's fields: 1-15, LEN
            raise _NotCanonical()
        length = buffer[i + 1]
        i += 2
        if length >= 0x80:
            length, i = _read_varint(buffer, i - 1)
        end = i + length
        if end > size:
            raise _NotCanonical()
        if key != 0x0A:
            others.append(buffer[start:end])
            i = end
            continue
        # A Sample: data (1) then meta (2), either absent when empty, nothing else.
        data = wire_meta = b""
        if i < end and buffer[i] == 0x0A:
            length = buffer[i + 1]
            i += 2
            if length >= 0x80:
                length, i = _read_varint(buffer, i - 1)
            data = buffer[i:i + length]
            i += length
        if i < end and buffer[i] == 0x12:
            length = buffer[i + 1]
            i += 2
            if length >= 0x80:
                length, i = _read_varint(buffer, i - 1)
            wire_meta = buffer[i:i + length]
            i += length
        if i != end:  # also when a length ran past the sample's end
            raise _NotCanonical()
        sample = new_sample(Sample)
        # No `meta` yet: Sample.meta decodes _wire_meta at first read.
        sample.__dict__.update(data=data, _wire_meta=wire_meta)
        samples.append(sample)
    rest = learner_pb2.LearnRequest.FromString(b"".join(others)) if others else \
        learner_pb2.LearnRequest()
    return samples, rest
