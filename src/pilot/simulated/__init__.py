"""The stand-ins: everything that plays a part of the study so the harness can run without the real one.

- ``agent``: the simulated agent (the embedded default backend, SIMULATED);
- ``judge``: the simulated judges;
- ``scripted_model``: the scripted Messages API behind a rehearsal (REHEARSAL);
- ``rehearsal_report``: a rehearsal checked against the scripted model's truth;
- ``synthetic``: synthetic run tables from a declared model with known truth;
- ``dry_run``: the known truth of a dry run, for the SIMULATED appendix;
- ``fake_runs``: run functions that only sleep, crash or hang, for the scheduler's tests.

Real code paths never import this package: the backend registry
(:mod:`pilot.backends`) names each stand-in by a ``"module:attr"`` string
and loads it when that backend is asked for.
"""
