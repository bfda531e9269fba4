"""Observation of the machine: device and environment capture, clocks and throttling (NVML), CPU and
GPU descriptions, contention, the device lock and the git state of the checkout."""
