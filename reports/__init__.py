"""rooflab reports: what results mean.

gpu_specs (datasheet table), ceilings (measured roofs from the probes), diagnosis (wall, efficiency,
fusion gains), predict, compare (generation comparison), regressions (nightly detection), plots
(SVG figures), html (the static site). Everything works on results DataFrames (db.query.results);
only load.py reads the database.
"""
