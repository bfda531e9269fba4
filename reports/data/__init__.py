"""What the reports read from the database (reads.py: the results; side_reads.py: the tables beside
them) and the helpers over its results frames: usable and trustworthy rows, params, devices
(frames.py), the run counts and case runs that runs are chosen from (run_counts.py), what an op
says of itself (op_facts.py), which physical device a result belongs to: a series' identity
(devices.py)."""
