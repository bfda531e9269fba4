"""A device's roofs: the datasheet figures (gpu_specs.py), the records the roofs share (models.py:
Ceiling, DeviceCeilings, Roof), the ceilings its probes measured (ceilings.py), the
elementary-function roofs (elementary.py), the interconnect roof and latency floor of collectives
(interconnect.py), the launch floors with their spread across runs (launch_floors.py), and which
runs a device page shows and which runs its roofs come from (shown_runs.py)."""
