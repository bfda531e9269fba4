"""One device or run against another: which results pair (pairing.py), a side as one physical
device or a model's median device (device_sides.py), what a comparison reads (inputs.py), one
comparison as the CLI and the page make it (compare_devices.py), the per-case speedup table with its
predicted speedups (speedup_table.py), the 95 % intervals (intervals.py) and the run-to-run spread
that widens them (run_spread.py)."""
