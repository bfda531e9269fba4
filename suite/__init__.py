"""rooflab: suite."""
