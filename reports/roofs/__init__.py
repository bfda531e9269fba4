"""A device's roofs: the datasheet figures (gpu_specs.py), the records the roofs share (models.py:
Ceiling, DeviceCeilings, Roof), the ceilings its probes measured (ceilings.py), the
elementary-function roofs (elementary.py), the interconnect roof and latency floor of collectives
(interconnect.py), and the launch floors with their spread across runs (launch_floors.py)."""
