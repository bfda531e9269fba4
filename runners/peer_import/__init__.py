"""Reading the peers' own output files into rooflab results (docs/peer-import.md).

One table (`format_table`) lists the formats read, one row each: how a file is recognised, its parser
and its converter. Two stages, kept apart on purpose:

- **parsers** (pure: text in, typed records out; no suite, no database): one module per tool,
  one typed record per parsed row. `nccl_tests` reads nccl-tests' (and rccl-tests') stdout,
  `nccl_json` nccl-tests' `-J` JSON, `rccl_files` rccl-tests' JSON lines and CSV, `nvbench` nvbench's
  `--json` (and its `--jsonbin` sidecars), `babelstream` BabelStream's `--csv`, `babelstream_text` its
  own table. `recognise` tells which row a file is, by its content (`sniff`). A malformed file raises
  `PeerFormatError` with the line and what is wrong.
- **conversion** (`collective_import`/`collective_results`, `nvbench_results`, `stream_results`, over
  `results`): parsed rows become `MeasurementRecord`s named and modelled as rooflab names and models its
  own cases (suite's pure work models), each with the figures its file printed; `agreement` then holds
  those figures to what would be stored (the rule of every import) before anything is.

The command line (`rooflab import`, runners/cli/import_cmd.py) puts them together through `files.read`
and stores each file in one transaction (db.record_batch).
"""
