"""Each fixed set is named once and each rule stated once: the same input gets the same answer and the
same reason wherever it is given."""
from __future__ import annotations

from pathlib import Path

import pytest

from rooflab.db.errors import DatabaseInputError
from rooflab.db.shards import parse_shard as parse_stored_shard
from rooflab.reports.regressions.verdicts import FailOn, Verdict, parse_fail_on, should_fail
from rooflab.runners.cluster import slurm_job
from rooflab.runners.cluster.nightly import NightlySummary, ShardState
from rooflab.runners.errors import UserInputError
from rooflab.runners.orchestration.shards import ShardError, parse_shard
from rooflab.vocab import DeviceKind, ResultStatus, RunStatus, device_index_of, device_kind_of
from tests.runners.cluster.test_slurm import make_job


@pytest.mark.parametrize(("device", "kind", "index"), [("cuda:3", DeviceKind.CUDA, 3), ("cuda", DeviceKind.CUDA, None),
                                                      ("cpu", DeviceKind.CPU, None), ("cuda:12", DeviceKind.CUDA, 12)])
def test_a_device_string_has_one_kind_and_index(device: str, kind: DeviceKind, index: int | None) -> None:
    assert device_kind_of(device) is kind and device_index_of(device) == index


@pytest.mark.parametrize("device", ["mps", "gpu:0", "Cuda:0", ""])
def test_a_device_of_no_known_kind_is_refused(device: str) -> None:
    with pytest.raises(ValueError):
        device_kind_of(device)


@pytest.mark.parametrize("text", ["4/4", "1/0", "a/b", "1/2/3", "-1/4", ""])
def test_one_shard_rule_for_the_command_line_and_the_store(text: str) -> None:
    with pytest.raises(DatabaseInputError) as stored:
        parse_stored_shard(text)
    with pytest.raises(ShardError) as given:
        parse_shard(text)
    reason = str(stored.value).split(": ", 1)[1]
    assert str(given.value) == f"--shard {text!r}: {reason}"


def test_shard_text_with_spaces_is_accepted_on_the_command_line_only() -> None:
    assert parse_shard(" 2 / 8 ") == (2, 8) and parse_stored_shard("2/8") == (2, 8)
    with pytest.raises(DatabaseInputError):
        parse_stored_shard("2 / 8")  # stored shards stay canonical


@pytest.mark.parametrize("fail_on", list(FailOn))
def test_every_fail_on_is_accepted_by_the_slurm_writer_nightly_and_the_check(tmp_path: Path, fail_on: FailOn) -> None:
    assert slurm_job.validate(make_job(tmp_path, fail_on=str(fail_on))).fail_on == fail_on  # drift was refused here
    assert parse_fail_on(str(fail_on)) is fail_on


def test_a_bad_fail_on_gets_one_reason_everywhere(tmp_path: Path) -> None:
    with pytest.raises(ValueError) as base:
        parse_fail_on("sometimes")
    with pytest.raises(slurm_job.SlurmArgumentError) as from_slurm:
        slurm_job.validate(make_job(tmp_path, fail_on="sometimes"))
    from rooflab.runners.cluster.nightly import NightlyOptions, nightly

    with pytest.raises(UserInputError) as from_nightly:
        nightly("unused.yaml", db="sqlite://", options=NightlyOptions(out_dir=tmp_path, fail_on="sometimes"))
    assert str(from_slurm.value) == str(from_nightly.value) == str(base.value)
    assert "allowed: regression, drift, suspect, never" in str(base.value)


class _V:
    """A stand-in with the two attributes should_fail reads (reports.regressions.verdicts.Judged)."""

    status: str
    drift: object | None

    def __init__(self, status: Verdict, drifting: bool) -> None:
        self.status, self.drift = status, (object() if drifting else None)


@pytest.mark.parametrize("status", list(Verdict))
@pytest.mark.parametrize("drifting", [False, True])
def test_nightly_and_the_regression_check_fail_on_the_same_series(status: Verdict, drifting: bool) -> None:
    row = {"case_key": "k", "device_name": "d", "device_fingerprint": "f", "baseline_ms": 1.0, "latest_ms": 1.1,
           "rel_change": 0.1, "z": 5.0}
    kinds = {str(status): (row,)} if status in (Verdict.REGRESSION, Verdict.SUSPECT, Verdict.IMPROVEMENT) else {}
    if drifting:
        kinds["drift"] = (row,)
    for fail_on in FailOn:
        summary = NightlySummary(
            run_id="r", suite="s", run_status=RunStatus.COMPLETE, db_url="sqlite://", counts={},
            shards=ShardState(0, (), (), ()),
            verdicts=kinds, series_checked=1, insufficient_data=0, fail_on=str(fail_on), report=None,
        )
        assert summary.alert == should_fail([_V(status, drifting)], str(fail_on)), (fail_on, status, drifting)


def test_statuses_are_their_stored_strings() -> None:
    assert [str(s) for s in ResultStatus] == ["ok", "incorrect", "failed", "crashed", "skipped"]
    assert ResultStatus.OK == "ok" and RunStatus("partial") is RunStatus.PARTIAL
