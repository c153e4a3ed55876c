"""Deliverable formats read outside the frozen oracle: slide decks (.pptx).

The pilot's oracle code (``pilot.oracles``) is hashed into every study's
freeze manifest and stays unchanged. A scenario whose deliverables include a
deck is judged through :mod:`pilot.oracle_formats.evaluate`, which hands every
other scenario to the core oracle untouched and reads decks with
:mod:`pilot.oracle_formats.pptx_reader`.
"""
