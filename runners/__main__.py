"""`python -m runners ...` is `rooflab ...` (useful where the console script is not installed)."""
from runners.cli import main

main()
