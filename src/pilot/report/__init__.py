"""Turn results into the manuscript's generated LaTeX: stage outputs, run reports, design tables, sentences and inline
numbers."""
