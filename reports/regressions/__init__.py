"""Regressions and history: results framed into series (series.py), the gate that judges one series
(gate.py, with changepoints.py), its words and exit policy (verdicts.py) and settings (options.py),
the check over a database (database_check.py) or over the history already read
(columns_source.py), one night's check (nightly_check.py), the history's points for its pages
(history_points.py) and the series `rooflab history` shows (history_view.py). The verdicts of a
database as `rooflab regressions` asks them: database_check.load_verdicts."""
