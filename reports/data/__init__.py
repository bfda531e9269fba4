"""What the reports read from the database (reads.py, the one place they read it) and the helpers
over its results frames: usable and trustworthy rows, params, devices (frames.py), which runs a page
shows (shown_runs.py), what an op says of itself (op_facts.py)."""
