"""Samples as the Learner API carries them, and numpy arrays packed into their bytes."""

from __future__ import annotations

import dataclasses
import io
import math
import zipfile
from typing import Any, Dict, Mapping, Optional

import numpy as np

from learner_aggregator.structs import from_struct_bytes

# decode_arrays' default bound on what one sample's arrays may take in memory: far
# above any sample a learner trains on, far below what a few compressed kilobytes of
# zeros could claim (an npz of 1 MB may declare gigabytes).
DEFAULT_MAX_DECODED_BYTES = 256 << 20


@dataclasses.dataclass
class Sample:
    """One training sample: opaque bytes for the learner plus a small metadata dict.

    The aggregator splits and forwards samples without reading `data`; `meta` is a
    Struct on the wire, so it holds JSON-like values (a `replay_unique_id` there is
    echoed by learners in their Learn info, by convention). The samples a learner is
    given decode their meta when it is first read (see _MetaFromWire).
    """

    data: bytes
    meta: Dict[str, Any] = dataclasses.field(default_factory=dict)


class _MetaFromWire:
    """Sample.meta of a sample a LearnerServer read from the wire (learner_aggregator.wire):
    its meta stays in its Struct bytes until first read, then is decoded once and kept
    as an ordinary attribute. A learner that never reads meta never pays to decode it.

    A non-data descriptor: a Sample made by its constructor, or one whose meta was
    read or assigned, has `meta` in its __dict__, and this is never consulted."""

    def __get__(self, sample: Optional[Sample], owner: Any = None) -> Dict[str, Any]:
        if sample is None:  # Sample.meta: the class has no such attribute, as before
            raise AttributeError("type object 'Sample' has no attribute 'meta'")
        state = sample.__dict__
        wire = state.get("_wire_meta")
        if wire is None:  # decoded by another thread meanwhile (or never had a meta)
            try:
                meta: Dict[str, Any] = state["meta"]
                return meta
            except KeyError:
                raise AttributeError("'Sample' object has no attribute 'meta'") from None
        # setdefault: threads reading it at once all get the one dict that stays.
        meta = state.setdefault("meta", from_struct_bytes(wire))
        state.pop("_wire_meta", None)
        return meta


def _sample_state(sample: Sample) -> Dict[str, Any]:
    """Sample.__getstate__: a sample from the wire is pickled (and copied) with its meta
    decoded, so that any Sample class can load it."""
    if "_wire_meta" in sample.__dict__:
        sample.meta  # decodes it into __dict__
    return sample.__dict__


# Set after the dataclass is made: the dataclass removed `meta` from the class (its
# default is a factory), and its __init__ still assigns it as a plain attribute.
setattr(Sample, "meta", _MetaFromWire())
setattr(Sample, "__getstate__", _sample_state)


def encode_arrays(arrays: Mapping[str, Any]) -> bytes:
    """Packs named arrays into bytes (numpy's .npz format, uncompressed).

    Values may be numpy arrays, anything np.asarray accepts, or torch tensors (moved to
    the CPU and detached). Object arrays are refused: a sample never carries pickles.
    """
    plain = {}
    for name, value in arrays.items():
        if hasattr(value, "detach"):  # a torch tensor
            value = value.detach().cpu().numpy()
        array = np.asarray(value)
        if array.dtype.hasobject:
            raise TypeError(f"array '{name}' has dtype object, which npz would pickle")
        plain[name] = array
    buffer = io.BytesIO()
    np.savez(buffer, **plain)
    return buffer.getvalue()


def decode_arrays(data: bytes,
                  max_bytes: Optional[int] = DEFAULT_MAX_DECODED_BYTES
                  ) -> Dict[str, "np.ndarray[Any, np.dtype[Any]]"]:
    """Unpacks bytes made by encode_arrays. Never unpickles (allow_pickle=False), so a
    sample from anywhere cannot run code; ValueError for data that is not an npz.

    ValueError too, before anything is allocated for them, when the arrays would take
    more than `max_bytes` together (as their headers declare them: a small compressed
    npz may declare gigabytes). None: no bound."""
    if not data.startswith(b"PK"):
        raise ValueError("not an npz (no zip header)")
    buffer = io.BytesIO(data)
    if max_bytes is not None:
        total = _declared_bytes(buffer)
        if total > max_bytes:
            raise ValueError(f"the arrays would take {total} bytes, over max_bytes "
                             f"{max_bytes}")
        buffer.seek(0)
    with np.load(buffer, allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}


def _declared_bytes(buffer: io.BytesIO) -> int:
    """What the members of an npz would take once loaded: an array's size from its
    .npy header (read before np.load allocates it), any other member's declared size."""
    total = 0
    try:
        with zipfile.ZipFile(buffer) as archive:
            for info in archive.infolist():
                with archive.open(info) as member:
                    prefix = member.read(len(np.lib.format.MAGIC_PREFIX))
                    if prefix != np.lib.format.MAGIC_PREFIX:
                        total += info.file_size
                        continue
                    version = member.read(2)  # major, minor
                    shape, _, dtype = _read_npy_header(member, version[0])
                total += math.prod(shape) * dtype.itemsize
    except (zipfile.BadZipFile, IndexError, EOFError) as e:
        raise ValueError(f"not an npz: {e}") from None
    return total


def _read_npy_header(member: Any, major: int) -> Any:
    """The (shape, fortran_order, dtype) of an .npy member whose magic prefix and
    version have been read."""
    if major == 1:
        return np.lib.format.read_array_header_1_0(member)  # type: ignore[no-untyped-call]
    if major in (2, 3):
        return np.lib.format.read_array_header_2_0(member)  # type: ignore[no-untyped-call]
    raise ValueError(f"an npz member has .npy format version {major}, unknown")
