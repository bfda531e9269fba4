"""suite.lazy.LazyModule: the real module takes the stand-in's place on the first read, in rooflab's
modules and in the module that read through it (an op plugin written like the built-in ops)."""
from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

from rooflab.suite.lazy import LazyModule

PLUGIN_CODE = """
def read():
    return stand_in.rgb_to_hsv(0.2, 0.4, 0.6)
"""


@pytest.fixture()
def plugin() -> Iterator[types.ModuleType]:
    """A module outside rooflab holding a stand-in for the standard library's colorsys."""
    module = types.ModuleType("a_plugin_of_ops")
    module.stand_in = LazyModule("colorsys")  # type: ignore[attr-defined]
    exec(PLUGIN_CODE, module.__dict__)  # noqa: S102 - the plugin's source, defined above
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


def test_a_plugin_that_reads_through_the_stand_in_holds_the_real_module_after_its_first_read(
        plugin: types.ModuleType) -> None:
    import colorsys

    assert isinstance(plugin.stand_in, LazyModule)
    assert plugin.read() == colorsys.rgb_to_hsv(0.2, 0.4, 0.6)
    # its later reads go to the module itself, not through a scan of every module (~0.5 ms each)
    assert plugin.stand_in is colorsys
    assert plugin.read() == colorsys.rgb_to_hsv(0.2, 0.4, 0.6)


def test_rooflabs_own_holders_get_the_real_module_whoever_reads_first(plugin: types.ModuleType,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    import colorsys

    import rooflab.suite.ops.common as common

    monkeypatch.setattr(common, "colorsys_for_this_test", plugin.stand_in, raising=False)
    plugin.read()  # the plugin reads first
    assert common.colorsys_for_this_test is colorsys  # type: ignore[attr-defined]
