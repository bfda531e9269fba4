"""The SDPA probe's answer: why a backend cannot run, with the reasons torch gives as warnings."""
from __future__ import annotations

import warnings

import pytest
import torch

from rooflab.suite.ops import attention


def test_the_reasons_torch_warns_go_into_the_skip_reason_and_do_not_escape(monkeypatch: pytest.MonkeyPatch) -> None:
    """As on a GPU where a forced backend cannot run: torch warns why for each kernel, then raises."""
    def refuses(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backend: object, causal: bool) -> torch.Tensor:
        warnings.warn("Memory efficient kernel not used because:", UserWarning, stacklevel=1)
        warnings.warn("Flash attention does not support   head_dim 257", UserWarning, stacklevel=1)
        raise RuntimeError("No available kernel.  Aborting execution.")

    monkeypatch.setattr(attention, "_sdpa", refuses)
    with warnings.catch_warnings(record=True) as escaped:
        warnings.simplefilter("always")
        reason = attention._probe.__wrapped__("sdpa_flash", "cpu", "float32", 257, False, 0)
    assert escaped == []
    assert reason == ("sdpa_flash cannot run float32, head_dim 257, causal=False on cpu: No available kernel. "
                      "Aborting execution. (Memory efficient kernel not used because:; "
                      "Flash attention does not support head_dim 257)")


def test_a_backend_that_runs_lets_its_warnings_through(monkeypatch: pytest.MonkeyPatch) -> None:
    def runs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, backend: object, causal: bool) -> torch.Tensor:
        warnings.warn("planted: something torch says on success", UserWarning, stacklevel=1)
        return q

    monkeypatch.setattr(attention, "_sdpa", runs)
    with pytest.warns(UserWarning, match="planted: something torch says on success"):
        assert attention._probe.__wrapped__("sdpa_math", "cpu", "float32", 16, True, 0) is None
