"""``pilot view``: browse every run of a study in a browser, live on 127.0.0.1 or as a static site.

- :mod:`pilot.view.study` reads the store (read-only) and the run folders;
- :mod:`pilot.view.conversation` turns an event stream into a conversation;
- :mod:`pilot.view.site` renders the pages (index, run, scenario);
- :mod:`pilot.view.app` serves them (Flask on waitress, loopback only);
- :mod:`pilot.view.export` writes them as a static site;
- :mod:`pilot.view.links` links the notebooks' run ids to a running viewer.
"""

from pilot.view.links import link_run_ids, run_link, viewer_url

__all__ = ["link_run_ids", "run_link", "viewer_url"]
