"""Reports of a run, built from its records alone."""
