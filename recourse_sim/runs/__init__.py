"""The parts of a run that are not its loop: table formats, the run directory, diagnostics."""
