"""fak's benchmarks: `python -m bench <name>` (see __main__.py). Results are printed, never asserted."""
