"""uvicorn's log lines, as a person reading the daemon's log expects them.

uvicorn logs everything of the server under ``uvicorn.error``, its INFO lines too
("Started server process", "Uvicorn running on ... (Press CTRL+C to quit)", "Shutting
down"...), and one access line per request under ``uvicorn.access``.  Here its records
are renamed ``roses.http`` and ``roses.http.access``; its INFO lines (start and stop
chatter: the server logs its own "listening on URL") and access lines become DEBUG,
shown with ``--verbose`` only; its warnings and errors (a malformed request, an error
in a handler) keep their level.
"""

from __future__ import annotations

import logging

HTTP_LOGGER = "roses.http"
ACCESS_LOGGER = "roses.http.access"
_RENAMED = {"uvicorn.error": HTTP_LOGGER, "uvicorn.access": ACCESS_LOGGER}


class UvicornRecords(logging.Filter):
    """Renames uvicorn's records and makes its INFO lines DEBUG (see the module doc)."""

    def filter(self, record: logging.LogRecord) -> bool:
        name = _RENAMED.get(record.name)
        if name is None:
            return True
        record.name = name
        if record.levelno == logging.INFO:
            # The record already passed uvicorn's logger level: check the new name's.
            if not logging.getLogger(name).isEnabledFor(logging.DEBUG):
                return False
            record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return True


_FILTER = UvicornRecords()


def quiet_uvicorn() -> None:
    """Install the filter on uvicorn's loggers (once; calling again changes nothing)."""
    for name in _RENAMED:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
