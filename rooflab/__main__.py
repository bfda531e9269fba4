"""`python -m rooflab ...` is `rooflab ...` (useful where the console script is not installed)."""
from rooflab.runners.cli import main

main()
