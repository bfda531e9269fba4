"""CuPy's view of torch's stream: Stream.from_external where CuPy has it (CuPy 14 deprecates
ExternalStream), ExternalStream on older CuPy. Fake cupy modules: no GPU needed."""
from __future__ import annotations

import types

from rooflab.suite.ops.pointwise import external_stream


def fake_cupy(with_from_external: bool) -> tuple[types.SimpleNamespace, list[tuple[str, int]]]:
    made: list[tuple[str, int]] = []

    class Stream:
        pass

    if with_from_external:
        Stream.from_external = staticmethod(lambda handle: made.append(("from_external", handle)) or "new")

    def external(handle: int) -> str:
        made.append(("ExternalStream", handle))
        return "old"

    return types.SimpleNamespace(cuda=types.SimpleNamespace(Stream=Stream, ExternalStream=external)), made


def test_from_external_is_preferred() -> None:
    cp, made = fake_cupy(True)
    assert external_stream(cp, 0x7F00) == "new"
    assert made == [("from_external", 0x7F00)]


def test_external_stream_on_older_cupy() -> None:
    cp, made = fake_cupy(False)
    assert external_stream(cp, 0x7F00) == "old"
    assert made == [("ExternalStream", 0x7F00)]
