"""rooflab: suite/ops."""
