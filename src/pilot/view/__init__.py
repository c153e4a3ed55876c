"""``pilot view``: browse every run of a study in a browser, live on 127.0.0.1 or as a static site.

- :mod:`pilot.view.study` reads the store (read-only) and the run folders;
- :mod:`pilot.view.conversation` turns an event stream into a conversation;
- :mod:`pilot.view.usage` reads the model proxy's record of tokens and cost;
- :mod:`pilot.view.sessions` says which caps each session reached and why a resume was granted;
- :mod:`pilot.view.changes` says what a run changed in its inputs;
- :mod:`pilot.view.oracle_text` writes oracle reasons and criteria for people;
- :mod:`pilot.view.aggregates` and :mod:`pilot.view.charts` make the "why" page's numbers and plots;
- :mod:`pilot.view.site` renders the pages (index, why, run, scenario);
- :mod:`pilot.view.app` serves them (Flask on waitress, loopback only);
- :mod:`pilot.view.export` writes them as a static site;
- :mod:`pilot.view.links` links the notebooks' run ids to a running viewer;
- :mod:`pilot.view.inspect_log` writes the runs as Inspect eval logs.
"""

from pilot.view.links import link_run_ids, run_link, viewer_url

__all__ = ["link_run_ids", "run_link", "viewer_url"]
