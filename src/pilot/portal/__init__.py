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

from pilot.portal.access_log import ACCESS_LOG_NAME, read_access_log, summarise_access_log
from pilot.portal.client import PortalClient, PortalClientError
from pilot.portal.credentials import CREDENTIALS_FILENAME, Credentials
from pilot.portal.instance import PortalInstance, PortalStartError, start_instance

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
