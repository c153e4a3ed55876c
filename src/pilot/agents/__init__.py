"""Agent backends and what surrounds a launch.

- ``launch``: an arm's CLI command line, settings, environment and masked
  programs, derived from ``protocol/arms``;
- ``sandbox``: the run's own mount namespace (bubblewrap; a sandbox-exec
  profile on macOS);
- ``claude_code``: the real backend, the pinned Claude Code CLI (the
  simulated one, the embedded default, is :mod:`pilot.simulated.agent`);
- ``session``: a session's outcome, its classification, the cost over a resume;
- ``audit``: the event stream read for counts and protocol deviations;
- ``worker_env``: the worker's own Python environment.
"""
