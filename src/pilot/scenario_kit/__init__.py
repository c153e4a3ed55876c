"""The scenario authoring kit: ``pilot scenarios new`` writes a skeleton, ``pilot scenarios check`` proves a bundle's
oracle.

- :mod:`pilot.scenario_kit.report`: one row per check (verdict, reason, seconds) and the report of several scenarios;
- :mod:`pilot.scenario_kit.checks`: the checks that evaluate workspaces (gold, no-op, text substitutes, the mutation
  matrix, cheats, input integrity, self-check parity), batched through one LibreOffice;
- :mod:`pilot.scenario_kit.traps`: each declared trap's fallen package and its row, and the probes of each
  criterion's tolerance and patterns;
- :mod:`pilot.scenario_kit.readings`: the figures a numeric criterion reads in a package;
- :mod:`pilot.scenario_kit.consistency`: the checks that read the bundle's files (brief, oracle and rubric agree
  entry by entry, no sentence gives a trap away; the judges' prompt carries no answer);
- :mod:`pilot.scenario_kit.skeleton`: a new bundle, its generator/solver module and its mutation tests, valid but
  unfinished.
"""
