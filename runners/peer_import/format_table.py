"""The formats `rooflab import` reads: one row each, in the order they are tried (the first whose test
holds is the file's format). docs/peer-import.md and `rooflab import --help` list what this table holds.

A row names the format, the tool that writes it and, in words, how it is recognised; then three
functions of this package, by module and name: the test that recognises it (on a `sniff.Sniff` of the
file's text), the parser (text in, typed records out; PeerFormatError for a malformed file) and the
converter (the records and a `results.Source` in, a `results.Conversion` out). They are imported when a
file is read, not with the table: every `rooflab` command reads the table for its help, and the
converters load the op models and numpy. A new format is a parser module, a converter module and one row;
a format that is a special case of a later row's layout (an nccl-tests `sendrecv_perf` table read as pair
results) stands before that row, and its recogniser is what tells them apart.

rooflab's own exports are told apart before the table is tried (recognise.py) and read by db.importer.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from rooflab.vocab import Tool

PACKAGE = "rooflab.runners.peer_import"


@dataclass(frozen=True)
class Named:
    """A function of this package, named by its module and its name; imported when it is first resolved."""

    module: str
    name: str

    def resolve(self) -> Callable[..., object]:
        found = getattr(importlib.import_module(f"{PACKAGE}.{self.module}"), self.name)
        if not callable(found):
            raise TypeError(f"{PACKAGE}.{self.module}.{self.name} is not a function")
        return found


@dataclass(frozen=True)
class Format:
    """One format `rooflab import` reads."""

    name: str
    tool: str
    recognised_by: str  # in words, for the help and the docs
    looks_like: Named  # (Sniff) -> bool
    parser: Named  # (str) -> records
    converter: Named  # (records, Source) -> Conversion


FORMATS: tuple[Format, ...] = (
    Format("nccl-tests JSON", Tool.NCCL_TESTS, "a JSON object with `config` and `results` (`-J FILE`)",
           Named("nccl_json", "recognises_nccl_json"), Named("nccl_json", "parse_nccl_json"),
           Named("collective_import", "convert_nccl_json")),
    Format("nvbench JSON", Tool.NVBENCH, "a JSON object with `devices` and `benchmarks` (`--json FILE`)",
           Named("nvbench", "recognises_nvbench"), Named("nvbench", "parse_nvbench_json"),
           Named("nvbench_results", "convert_nvbench")),
    Format("rccl-tests JSON", Tool.RCCL_TESTS, "JSON objects with `name`, `size`, `algBw` and `busBw`, one a line "
           "or in a list (`-x FILE -Z json`)",
           Named("rccl_files", "recognises_rccl_json"), Named("rccl_files", "parse_rccl_json"),
           Named("collective_import", "convert_rccl_results")),
    Format("BabelStream CSV", Tool.BABELSTREAM, "a CSV header `function,num_times,n_elements,sizeof,max_..._per_sec,"
           "...` or `phase,n_elements,...` (`--csv`)",
           Named("babelstream", "looks_like_babelstream"), Named("babelstream", "parse_babelstream_csv"),
           Named("stream_results", "convert_babelstream")),
    Format("rccl-tests CSV", Tool.RCCL_TESTS, "a CSV header of rccl-tests' result fields (`-x FILE -Z csv`)",
           Named("rccl_files", "recognises_rccl_csv"), Named("rccl_files", "parse_rccl_csv"),
           Named("collective_import", "convert_rccl_results")),
    Format("nccl-tests sendrecv_perf of two ranks", Tool.NCCL_TESTS, "an nccl-tests output of `sendrecv_perf` whose "
           "device lines name ranks 0 and 1 only: the pair of the link matrix (`sendrecv_pairs`)",
           Named("nccl_tests", "looks_like_sendrecv_pair"), Named("nccl_tests", "parse_nccl_tests_text"),
           Named("collective_import", "convert_sendrecv_pairs")),
    Format("nccl-tests or rccl-tests output", f"{Tool.NCCL_TESTS}, {Tool.RCCL_TESTS}",
           "a table header naming `size count type ... algbw busbw`, anywhere in the text (stdout, as logs keep it)",
           Named("nccl_tests", "looks_like_nccl_tests"), Named("nccl_tests", "parse_nccl_tests_text"),
           Named("collective_import", "convert_nccl_tests")),
    Format("nvbandwidth output", Tool.NVBANDWIDTH, "a `Running TESTCASE.` line, then a matrix's description "
           "ending in `bandwidth (GB/s)` (stdout): its matrices between GPUs as pairs of the link matrix "
           "(`--buffer-mib` gives its buffer size)",
           Named("nvbandwidth", "looks_like_nvbandwidth"), Named("nvbandwidth", "parse_nvbandwidth_text"),
           Named("nvbandwidth_results", "convert_nvbandwidth")),
    Format("BabelStream output", Tool.BABELSTREAM, "its table header `Function  MBytes/sec  Min (sec)  Max  Average` "
           "and a `Precision:` line (stdout without `--csv`)",
           Named("babelstream_text", "looks_like_babelstream_text"),
           Named("babelstream_text", "parse_babelstream_text"),
           Named("stream_results", "convert_babelstream")),
)


def format_names() -> str:
    """The table's formats in words, in its order (for the help)."""
    return ", ".join(f.name for f in FORMATS)
