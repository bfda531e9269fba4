"""`python -m rooflab ...` is `rooflab ...` (useful where the console script is not installed)."""
from rooflab.runners.cli import main

if __name__ == "__main__":  # a spawned helper process imports this module as __mp_main__: it must not run the CLI
    main()
