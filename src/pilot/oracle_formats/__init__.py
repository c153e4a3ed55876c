"""Deliverable formats read beside the core oracle: slide decks (.pptx).

The oracle's criterion loop and verdict are :mod:`pilot.oracles.evaluate`'s
alone. :mod:`pilot.oracle_formats.evaluate` is the entry point every caller
uses: it tells the core how to read a scenario's workspace (the core's own
context for a scenario without a deck, the deck reading of
:mod:`pilot.oracle_formats.pptx_reader` for one with a deck). Only a study with
a deck scenario hashes this package into its freeze manifest.
"""
