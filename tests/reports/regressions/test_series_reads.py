"""Which reads hold the series the regression check reads again in full (DatabaseSource._reads): by
device each GPU's own cases through its index, else the cases whole."""
from __future__ import annotations

from rooflab.reports.regressions.database_check import DatabaseSource, device_uuid_of
from rooflab.vocab import SeriesBy


def test_a_series_id_names_its_gpu_unless_the_device_has_no_uuid():
    assert device_uuid_of("GPU-5e1f") == "GPU-5e1f"
    assert device_uuid_of("nccl-tests@GPU-5e1f") == "GPU-5e1f"  # another tool's series on the GPU
    assert device_uuid_of("node7/AMD EPYC 9654") is None
    assert device_uuid_of("nccl-tests@node7/AMD EPYC 9654") is None


def test_by_device_each_gpu_reads_its_own_cases():
    source = DatabaseSource("sqlite:///unused.db", SeriesBy.DEVICE)
    keys = {("case-b", "GPU-2"), ("case-a", "GPU-1"), ("case-c", "GPU-1"), ("case-a", "nccl-tests@GPU-2")}
    assert source._reads(keys) == [(["case-a", "case-c"], ["GPU-1"]), (["case-a", "case-b"], ["GPU-2"])]


def test_a_device_without_a_uuid_or_a_series_by_model_reads_the_cases_whole():
    keys = {("case-b", "GPU-2"), ("case-a", "node7/AMD EPYC 9654")}
    assert DatabaseSource("sqlite:///unused.db", SeriesBy.DEVICE)._reads(keys) == [(["case-a", "case-b"], None)]
    by_model = {("case-b", "fp-h100"), ("case-a", "fp-h100")}
    assert DatabaseSource("sqlite:///unused.db", SeriesBy.MODEL)._reads(by_model) == [(["case-a", "case-b"], None)]
