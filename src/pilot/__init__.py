"""pilot: run, evaluate and report the preregistered computer-access study.

The package is deliberately thin: protocol loading, scheduling, the runner,
oracles, judges and statistics live in one module (or sub-package) each, and
the notebooks under ``notebooks/`` narrate the preregistered stages by
calling them.
"""

__version__ = "0.1.0"
