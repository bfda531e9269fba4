"""rooflab: runners."""
