from __future__ import annotations

import pytest

from rooflab.reports.roofs.gpu_specs import SPECS, match_device
from tests.present import present

REQUIRED = ["A100 SXM 80GB", "A100 PCIe 80GB", "H100 SXM", "H100 PCIe", "H200", "B200", "L40S", "L4", "A10",
            "V100 SXM2", "MI300X"]


@pytest.mark.parametrize("name, key", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H200", "H200"),
    ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"),
    ("NVIDIA A100-SXM4-40GB", "A100 SXM 40GB"),
    ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB"),
    ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB"),
    ("NVIDIA B200", "B200"),
    ("NVIDIA L40S", "L40S"),
    ("NVIDIA L4", "L4"),
    ("NVIDIA A10", "A10"),
    ("Tesla V100-SXM2-16GB", "V100 SXM2"),
    ("AMD Instinct MI300X", "MI300X"),
    ("h100 sxm", "H100 SXM"),
    ("A100", "A100 SXM 80GB"),
    ("a100 pcie", "A100 PCIe 80GB"),
    ("H100", "H100 SXM"),
    ("V100", "V100 SXM2"),
])
def test_detected_names_match(name, key):
    spec = match_device(name)
    assert spec is not None and spec.key == key


@pytest.mark.parametrize("name", ["NVIDIA GeForce RTX 4090", "NVIDIA GB200", "NVIDIA L40", "cpu", "", None,
                                  "NVIDIA H100 NVL", "Tesla V100-PCIE-16GB"])
def test_unknown_devices_have_no_spec(name):
    assert match_device(name) is None


def test_table_covers_required_devices_and_every_figure_has_a_source():
    keys = {s.key for s in SPECS}
    assert set(REQUIRED) <= keys
    for spec in SPECS:
        figures = [spec.memory_gbps, spec.l2_bytes, spec.sm_count, *spec.vector_tflops.values(),
                   *spec.matrix_tflops.values()]
        for fig in figures:
            assert fig is not None and fig.value > 0 and fig.source.strip()
        # dense tensor peaks: bf16 above tf32 above fp32 vector
        bf16 = present(spec.peak_tflops("bfloat16", matrix=True) or spec.peak_tflops("float16", matrix=True))
        assert bf16.value > spec.vector_tflops["float32"].value
        if "tf32" in spec.matrix_tflops:
            assert spec.matrix_tflops["tf32"].value == pytest.approx(bf16.value / 2, rel=0.03)


def test_known_datasheet_figures():
    h100 = present(match_device("NVIDIA H100 80GB HBM3"))
    assert h100.memory_gbps.value == 3350
    assert present(h100.peak_tflops("bfloat16", matrix=True)).value == pytest.approx(989.4)
    assert present(h100.peak_tflops("float8_e4m3fn", matrix=True)).value == pytest.approx(1978.9)
    assert present(h100.peak_tflops("float32", matrix=False)).value == pytest.approx(66.9)
    a100 = present(match_device("NVIDIA A100-SXM4-80GB"))
    assert a100.peak_tflops("float8_e4m3fn", matrix=True) is None  # no fp8 on Ampere


def test_figures_rows_carry_units_and_sources():
    rows = present(match_device("H100 SXM")).figures()
    by = {r["quantity"]: r for r in rows}
    assert by["memory bandwidth"]["value"] == 3350 and by["memory bandwidth"]["unit"] == "GB/s"
    assert by["matrix int8"]["unit"] == "TOPS"
    assert all(r["source"] for r in rows)
