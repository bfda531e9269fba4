"""rooflab: reports."""
