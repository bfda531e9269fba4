"""Reading the peers' own output files into rooflab results (docs/peer-import.md).

Two stages, kept apart on purpose:

- **parsers** (pure: text in, typed records out; no suite, no database): one module per tool,
  one typed record per parsed row. `nccl_tests` reads nccl-tests' (and rccl-tests') stdout,
  `nccl_json` nccl-tests' `-J` JSON, `rccl_files` rccl-tests' JSON lines and CSV, `nvbench` nvbench's
  `--json` (and its `--jsonbin` sidecars), `babelstream` BabelStream's `--csv`, `babelstream_text` its
  own table. `recognise` tells which one a file is, by its content. A malformed file raises
  `PeerFormatError` with the line and what is wrong.
- **conversion** (`collective_results`, `nvbench_results`, `stream_results`, over `results`): parsed rows
  become `MeasurementRecord`s named and modelled as rooflab names and models its own cases (suite's
  pure work models), with the tool's printed figures checked against them.

The command line (`rooflab import`, runners/cli/import_cmd.py) puts the two together and stores each
file in one transaction (db.record_batch).
"""
