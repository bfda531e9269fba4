"""One device's empirical roofline: the results shown, the runs they come from and the ceilings.

Assembled here once, for the device page of the report (reports/pages/report.py) and for `rooflab roofline`
(runners/cli/report_cmd.py), so that both show the same runs against the same roofs.
"""
from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from rooflab.reports.data.frames import is_cpu
from rooflab.reports.pages import plots
from rooflab.reports.roofs.ceilings import compute_ceilings
from rooflab.reports.roofs.models import DeviceCeilings
from rooflab.reports.roofs.shown_runs import DeviceRuns, rows_for


@dataclass(frozen=True)
class DeviceRoofline:
    name: str  # the device's name
    plan: DeviceRuns  # which runs are shown, and which set the roofs
    rows: pd.DataFrame  # the results of the shown runs
    ceilings: DeviceCeilings
    on_cpu: bool  # a CPU: its last-level cache is called LLC and its memory DRAM

    def roofline_svg(self, *, inline: bool = False) -> str:
        return plots.roofline_svg(self.rows, self.ceilings, inline=inline)

    def bandwidth_svg(self) -> str:
        return plots.bandwidth_svg(self.rows, self.ceilings.l2_bytes, self.name)


def device_roofline(name: str, device_rows: pd.DataFrame, plan: DeviceRuns) -> DeviceRoofline:
    """The roofline of device `name` from its results `device_rows` and the runs `plan` chose."""
    rows, roof_rows = rows_for(device_rows, plan)
    return DeviceRoofline(name, plan, rows, compute_ceilings(roof_rows, name), is_cpu(rows))
