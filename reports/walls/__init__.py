"""Which wall a case hits and how far it is from it: the roofline rule itself (roofline_rule.py:
a case's roofline time, wall, efficiency and attainable rate from its work and its roofs), and its
callers: the diagnosis of measured cases (diagnosis.py), a block's time split by part
(breakdown.py), the prediction before a run (predict.py), and the model held against the hardware
counters (counters_check.py)."""
