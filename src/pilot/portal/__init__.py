"""The enterprise portal that A3 and A4 reach: a company intranet served over loopback.

- ``content``: the generator that writes ``protocol/scenarios/<ID>/portal/``
  from the scenario's inputs, and its reader;
- ``app``: the Flask application (pages and JSON API); ``server``: the
  waitress process that serves it;
- ``instance``: start one run's instance (``start_instance``), check its
  health and what it served at the end of the run (``end_of_run``), stop it;
- ``redaction``: the password kept out of transcripts, logs and records;
- ``client``: a small HTTP client (``PortalClient``);
- ``access_log``: the per-run access log and its summary.
"""

from pilot.lazy_exports import lazy_exports

_EXPORTS = {
    "ACCESS_LOG_NAME": "pilot.portal.access_log",
    "read_access_log": "pilot.portal.access_log",
    "summarise_access_log": "pilot.portal.access_log",
    "PortalClient": "pilot.portal.client",
    "PortalClientError": "pilot.portal.client",
    "CREDENTIALS_FILENAME": "pilot.portal.credentials",
    "Credentials": "pilot.portal.credentials",
    "PortalInstance": "pilot.portal.instance",
    "PortalStartError": "pilot.portal.instance",
    "start_instance": "pilot.portal.instance",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

__all__ = [
    "ACCESS_LOG_NAME",
    "CREDENTIALS_FILENAME",
    "Credentials",
    "PortalClient",
    "PortalClientError",
    "PortalInstance",
    "PortalStartError",
    "read_access_log",
    "start_instance",
    "summarise_access_log",
]
