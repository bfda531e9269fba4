"""rooflab reports: what results mean, in rooms.

data/ (what the reports read from the database, and the helpers over its results frames), roofs/
(the device's roofs: datasheet figures and the ceilings the probes measured), walls/ (which wall a
case hits: diagnosis, layer breakdown, prediction, the model against the counters), comparisons/
(one device or run against another, with intervals), regressions/ (series, the gate, change points,
the history), pages/ (the static HTML report: pages, figures, templates). Everything works on
results DataFrames (db.query.results).

The rooms stand on floors, and a module imports only its own room and the floors below:
data < roofs < walls < comparisons, regressions < pages (comparisons and regressions share a floor
and do not import each other; errors.py and allocator.py here are the ground). tests/test_layering.py
holds it.
"""
