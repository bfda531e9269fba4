"""Which wall a case hits and how far it is from it: the diagnosis of measured cases (diagnosis.py),
a block's time split by part (breakdown.py), the prediction before a run (predict.py), and the
model held against the hardware counters (counters_check.py)."""
