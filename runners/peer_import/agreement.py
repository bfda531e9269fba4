"""The one rule of every import: a result is stored `ok` only when rooflab's own rates, re-derived from
the bytes and the time it would store, agree with the figures the file printed.

Each converter hands over its results with the rates the file printed for them (`results.Imported`,
`printed.PrintedRate`): nccl-tests' busbw and algbw, BabelStream's bandwidth, nvbench's global memory
bandwidth. `settle` re-derives each one from the record about to be stored (its `work.bytes` and the
stored time the tool divided by, through db/rates.py, the derivation the store itself uses) and holds
it against the printed figure within half a unit of its last printed digit, widened by the rounding of
the printed time the stored time came from and by half a byte of the stored bytes. Where a converter
stores a time finer than the printed one (BabelStream's fastest run, read from its bandwidth), that
printed time comes too (`printed.PrintedTime`) and the stored time must lie within its rounding. Then:

- every figure agrees: the conversion is stored as it is;
- a figure of a result the file itself says is wrong (nccl-tests' `#wrong` or failed footer,
  BabelStream's own validation) disagrees: the result keeps its status and the disagreement goes into
  its note (a failed run's figures are not trusted anyway);
- a figure of any other result disagrees: the whole file is refused (PeerFormatError: exit 2, nothing
  of it stored), with the first disagreement's line and figures and how many there are. A wrong element
  count, a wrong world size, a run's times read against another run's size or an edited figure all end
  here, and never as a stored `ok` rate the file did not print.
"""
from __future__ import annotations

import dataclasses

from rooflab.db import rates
from rooflab.record import MeasurementRecord
from rooflab.runners.peer_import.errors import PeerFormatError
from rooflab.runners.peer_import.printed import PrintedRate, PrintedTime, agrees
from rooflab.runners.peer_import.results import Conversion, Imported, note
from rooflab.vocab import ResultStatus


def stored_time_ms(record: MeasurementRecord, figure: PrintedRate | PrintedTime) -> float | None:
    """The stored time `figure` is a rate over, or is (None: the result has no statistics)."""
    if record.stats is None:
        return None
    return float(getattr(record.stats, figure.time.value))


def rederived_gbps(record: MeasurementRecord, rate: PrintedRate) -> float | None:
    """`rate` as rooflab derives it from what it stores of the result: scale x bytes over the stored time."""
    ms = stored_time_ms(record, rate)
    if ms is None or not ms > 0:
        return None
    return float(rates.gbps(record.work.bytes * rate.scale, ms))


def disagreement(record: MeasurementRecord, figure: PrintedRate | PrintedTime) -> str | None:
    """Why the stored figures do not give the printed one (None: they do, within its rounding)."""
    if isinstance(figure, PrintedTime):
        ms = stored_time_ms(record, figure)
        if ms is not None and agrees(ms, figure.printed_ms, figure.slack):
            return None
        return (f"{figure.where}: {figure.what} printed {figure.printed_ms.value:.6g} ms, but the time rooflab "
                f"would store for {record.identity.case.case_key} is {ms:.6g} ms")
    rate = figure
    found = rederived_gbps(record, rate)
    if found is None:
        return f"{rate.where}: {rate.what} printed, but the result has no positive time to derive it from"
    half_byte = 0.5 / record.work.bytes if record.work.bytes else 0.0
    if agrees(found, rate.printed_gbps, rate.time_slack + half_byte):
        return None
    ms = stored_time_ms(record, rate)
    return (f"{rate.where}: {rate.what} printed {rate.printed_gbps.value:.6g} GB/s, but the "
            f"{record.work.bytes * rate.scale:.0f} B rooflab counts for {record.identity.case.case_key} over the "
            f"{ms:.6g} ms it would store give {found:.6g} GB/s")


def _checked(item: Imported) -> tuple[Imported, list[tuple[int | None, str]]]:
    """The result (a failed one with its disagreements in its note) and the disagreements that refuse it
    (each with its line)."""
    found = [(rate.line, d) for rate in item.printed if (d := disagreement(item.record, rate)) is not None]
    if not found or item.record.status == ResultStatus.OK:
        return item, found
    texts = [f"line {line}: {text}" if line is not None else text for line, text in found]
    record = dataclasses.replace(item.record, error=note([item.record.error, *texts]))
    return dataclasses.replace(item, record=record), []


def settle(conversion: Conversion) -> Conversion:
    """`conversion` once every printed rate is held against the stored figures (see the module doc);
    PeerFormatError when a result stored `ok` would not give what the file printed."""
    refusals: list[tuple[int | None, str]] = []
    for run in conversion.runs:
        settled = []
        for item in run.results:
            kept, refused = _checked(item)
            settled.append(kept)
            refusals += refused
        run.results = settled
    if refusals:
        line, first = refusals[0]
        more = f" ({len(refusals) - 1} more figures disagree)" if len(refusals) > 1 else ""
        raise PeerFormatError(f"{first}{more}: a stored result must give the figures its file printed (to their "
                              "printed rounding), so the file is refused", line)
    return conversion
