"""The ``pilot`` command line: one module per command group, each parsing its options and calling the library.

:mod:`pilot.cli.main` holds the lazy command table. No library code lives
here, and nothing outside this package imports it.
"""
