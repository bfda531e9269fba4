"""CuPy is handed torch's stream the way its own API accepts: CuPy 14's `Stream.from_external`
takes an object with `__cuda_stream__` and refuses a bare int (seen on an H100 with CuPy 14)."""
from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from rooflab.suite.ops.pointwise import external_stream


class _StreamFromExternal:
    @staticmethod
    def from_external(obj: object) -> tuple[str, int]:
        if not hasattr(obj, "__cuda_stream__"):  # what CuPy 14 does with an int
            raise TypeError(f"Object of type {type(obj).__name__} does not implement the CUDA stream protocol")
        version, handle = obj.__cuda_stream__()
        assert version == 0
        return ("stream", handle)


def test_cupy_14_gets_the_handle_through_the_stream_protocol() -> None:
    handle = random.randrange(1, 1 << 47)
    cp = SimpleNamespace(cuda=SimpleNamespace(Stream=_StreamFromExternal))
    assert external_stream(cp, handle) == ("stream", handle)


def test_older_cupy_gets_an_external_stream_over_the_int() -> None:
    handle = random.randrange(1, 1 << 47)
    cp = SimpleNamespace(cuda=SimpleNamespace(Stream=object, ExternalStream=lambda h: ("external", h)))
    assert external_stream(cp, handle) == ("external", handle)


def test_a_bare_int_is_what_the_fake_refuses() -> None:
    with pytest.raises(TypeError, match="stream protocol"):
        _StreamFromExternal.from_external(12345)
