"""rooflab: db."""
