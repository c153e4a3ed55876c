"""Turn results into the manuscript's generated LaTeX: tables and one macro per number."""

from pilot.report.latex import (  # noqa: F401
    SIMULATED_TAG,
    latex_escape,
    macro_name,
    write_macros,
    write_table,
)
