"""Samples as the Learner API carries them, and numpy arrays packed into their bytes."""

from __future__ import annotations

import dataclasses
import io
from typing import Any, Dict, Mapping

import numpy as np


@dataclasses.dataclass
class Sample:
    """One training sample: opaque bytes for the learner plus a small metadata dict.

    The aggregator splits and forwards samples without reading `data`; `meta` is a
    Struct on the wire, so it holds JSON-like values (a `replay_unique_id` there is
    echoed by learners in their Learn info, by convention).
    """

    data: bytes
    meta: Dict[str, Any] = dataclasses.field(default_factory=dict)


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


def decode_arrays(data: bytes) -> Dict[str, np.ndarray]:
    """Unpacks bytes made by encode_arrays. Never unpickles (allow_pickle=False), so a
    sample from anywhere cannot run code; ValueError for data that is not an npz."""
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        return {name: npz[name] for name in npz.files}
