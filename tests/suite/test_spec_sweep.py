"""Value forms and axes of a sweep (suite.sweep)."""
from __future__ import annotations

import pytest

from rooflab.suite import sweep
from rooflab.suite.sweep import SweepError, expand_values


def test_scalar_and_list_and_mixed_list() -> None:
    assert expand_values(7, 100) == [7]
    assert expand_values("naive", 100) == ["naive"]
    assert expand_values([3, 1, 2], 100) == [3, 1, 2]
    # list items may be ranges; they are concatenated in order
    assert expand_values([1000, {"pow2": [2, 4]}, {"start": 5, "stop": 7, "step": 1}], 100) == [1000, 4, 8, 16, 5, 6, 7]


def test_arithmetic_inclusive_stop_and_not_reached_stop() -> None:
    assert expand_values({"start": 128, "stop": 512, "step": 128}, 100) == [128, 256, 384, 512]
    assert expand_values({"start": 1, "stop": 10, "step": 4}, 100) == [1, 5, 9]
    assert expand_values({"start": 10, "stop": 4, "step": -3}, 100) == [10, 7, 4]


def test_arithmetic_floats_have_no_rounding_noise() -> None:
    values = expand_values({"start": 0.1, "stop": 0.5, "step": 0.1}, 100)
    assert values == [0.1, 0.2, 0.3, 0.4, 0.5]


def test_geometric_and_pow2() -> None:
    assert expand_values({"start": 1, "stop": 1024, "factor": 4}, 100) == [1, 4, 16, 64, 256, 1024]
    assert expand_values({"start": 3, "stop": 100, "factor": 2}, 100) == [3, 6, 12, 24, 48, 96]
    assert expand_values({"pow2": [10, 13]}, 100) == [1024, 2048, 4096, 8192]
    assert expand_values({"start": 1000, "stop": 5000, "factor": 1.5}, 100) == [1000.0, 1500.0, 2250.0, 3375.0]


@pytest.mark.parametrize(
    ("form", "fragment"),
    [
        ({"start": 1, "stop": 10, "step": 0}, "step must not be 0"),
        ({"start": 10, "stop": 1, "step": 1}, "empty range"),
        ({"start": 0, "stop": 10, "factor": 2}, "start > 0"),
        ({"start": 1, "stop": 10, "factor": 1}, "factor must be > 1"),
        ({"start": 16, "stop": 4, "factor": 2}, "empty range"),
        ({"pow2": [5, 3]}, "lo <= hi"),
        ({"pow2": [1.5, 3]}, "two integer exponents"),
        ({"pow2": 10}, "two integer exponents"),
        ({"start": "a", "stop": 3, "step": 1}, "start must be a number"),
        ({"start": 1, "stop": 3}, "unknown range form"),
        ([], "empty sweep"),
        (None, "no value given"),
        ([[1, 2]], "must be a scalar or a range"),
    ],
)
def test_bad_forms_are_rejected(form: object, fragment: str) -> None:
    with pytest.raises(SweepError, match=fragment):
        expand_values(form, 100)


def test_range_longer_than_max_values_is_rejected_without_materialising() -> None:
    with pytest.raises(SweepError, match="range has 1000000000001 values"):
        expand_values({"start": 0, "stop": 10**12, "step": 1}, 5000)


def test_tied_axis_and_zip_axis_and_product() -> None:
    tied = sweep.tied_axis("m=n=k", [64, 128], ("params", "m=n=k"), 100)
    assert tied.names == ("m", "n", "k")
    assert tied.rows == ((64, 64, 64), (128, 128, 128))
    zipped = sweep.zip_axis({"seq_q": [1, 2, 3], "seq_k": {"pow2": [4, 6]}}, ("zip", 0), 100)
    assert zipped.rows == ((1, 16), (2, 32), (3, 64))
    points = list(sweep.product([tied, zipped]))
    assert len(points) == 6 == sweep.count_points([tied, zipped])
    assert points[0] == {"m": 64, "n": 64, "k": 64, "seq_q": 1, "seq_k": 16}
    assert points[-1] == {"m": 128, "n": 128, "k": 128, "seq_q": 3, "seq_k": 64}


def test_zip_lengths_must_match() -> None:
    with pytest.raises(SweepError, match="seq_q has 3, seq_k has 2"):
        sweep.zip_axis({"seq_q": [1, 2, 3], "seq_k": [1, 2]}, ("zip", 0), 100)
    with pytest.raises(SweepError, match="twice"):
        sweep.tied_axis("m=m", [1], (), 100)
