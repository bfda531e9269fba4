"""rooflab.suite.dtypes: element sizes, torch dtypes, and the tolerance policy of checks."""
from __future__ import annotations

import pytest
import torch

from rooflab.suite.case import DTYPES
from rooflab.suite.dtypes import element_size, storage_dtype, tolerance, torch_dtype
from rooflab.suite.ops.common import compare


def test_element_sizes():
    expected = {"float64": 8, "float32": 4, "tf32": 4, "float16": 2, "bfloat16": 2,
                "float8_e4m3fn": 1, "float8_e5m2": 1, "int8": 1, "int32": 4}
    assert {d: element_size(d) for d in DTYPES} == expected


def test_only_tf32_is_stored_as_another_dtype() -> None:
    assert {d: storage_dtype(d) for d in DTYPES if storage_dtype(d) != d} == {"tf32": "float32"}
    for name in DTYPES:  # the torch dtype made for a dtype is its storage's
        assert torch_dtype(name) is getattr(torch, storage_dtype(name))


def test_torch_dtypes():
    assert torch_dtype("tf32") is torch.float32
    assert torch_dtype("bfloat16") is torch.bfloat16
    assert torch_dtype("float8_e4m3fn") is torch.float8_e4m3fn
    for name in DTYPES:
        assert torch_dtype(name).itemsize == element_size(name)


def test_unknown_dtype_names_the_known_ones():
    with pytest.raises(KeyError, match="float32"):
        element_size("float12")
    with pytest.raises(KeyError):
        torch_dtype("float12")


def test_tolerance_follows_precision_and_accumulation_length():
    f64, f32, f16, bf16 = (tolerance(d) for d in ("float64", "float32", "float16", "bfloat16"))
    assert f64.rtol < f32.rtol < f16.rtol < bf16.rtol
    assert tolerance("float32", 1 << 20).atol_scale > tolerance("float32", 1).atol_scale
    # an accumulation of n terms loosens the absolute part by about sqrt(n) accumulator ulps
    grow = tolerance("float32", 10_000).atol_scale - tolerance("float32", 1).atol_scale
    assert grow == pytest.approx(8 * 2.0**-24 * (100 - 1))
    assert tolerance("tf32").rtol > tolerance("float32").rtol
    with pytest.raises(ValueError):
        tolerance("float32", 0)
    with pytest.raises(KeyError):
        tolerance("int8")


def test_compare_accepts_rounding_and_rejects_one_percent_in_float32():
    gen = torch.Generator().manual_seed(0)
    ref = torch.randn(10_000, dtype=torch.float64, generator=gen)
    assert compare(ref.float(), ref, "float32") is None
    assert compare(ref.half(), ref, "float16") is None
    assert compare(ref.bfloat16(), ref, "bfloat16") is None
    message = compare((ref * 1.01).float(), ref, "float32")
    assert message and "max abs error" in message and "max rel error" in message
    assert compare((ref * 1.01).half(), ref, "float16") is not None
    assert compare((ref * 1.05).bfloat16(), ref, "bfloat16") is not None


def test_chunked_comparison_bounds_the_reference_and_names_the_rows(monkeypatch):
    from rooflab.suite.ops import common

    monkeypatch.setattr(common, "CHECK_CHUNK_ELEMENTS", 64)
    x = torch.randn(100, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    seen = []

    def reference(rows):
        seen.append(rows)
        return x[rows].sum(dim=1, keepdim=True)

    out = x.sum(dim=1, keepdim=True).float()
    assert common.compare_chunked(out, reference, "float32", 32, input_row_elements=32) is None
    assert max(r.stop - r.start for r in seen) == 2  # 64 elements / 32 per input row
    out[77] += 1.0
    message = common.compare_chunked(out, reference, "float32", 32, input_row_elements=32)
    assert message and "rows 76..77" in message
