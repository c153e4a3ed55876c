"""The contract between ``instance.py`` and the server process it starts."""

LOOPBACK = "127.0.0.1"  # the only address the portal ever binds
# Exit codes of the server process that the parent turns into a PortalStartError reason.
EXIT_CONTENT = 3
EXIT_BIND = 4
EXIT_SETUP = 5
