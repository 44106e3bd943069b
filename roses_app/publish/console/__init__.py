"""The operator's web console at ``/console/`` (``settings.console``; off by default).

Routes (every page but the login page needs a session; every POST but the login's
needs the session's CSRF token and this site's Origin)::

    GET  /console/                  overview: sources by status, streams, queries
    GET  /console/login             the login form; POST: log in (429 when locked out)
    POST /console/logout            end the session
    GET  /console/sources           every source's health: filter, sort, pages
    GET  /console/sources/NAME      one source: health, last polls, newest items
    GET  /console/streams           the global plan (SVG) and the streams, paged
    GET  /console/streams/NAME      one stream: definition, counters, chart, items, plans
    GET  /console/editor            the query editor (?stream=NAME to edit one)
    POST /console/preview           JSON: a preview of the editor's text
    POST /console/apply             write a stream to feeds.yaml (or remove it), reload
    GET  /console/static/NAME       the console's stylesheet and script

The daemon gives everything the console reads or calls as one
:class:`~roses_app.publish.console.deps.ConsoleDeps`.
"""

from roses_app.publish.console.app import console_mount
from roses_app.publish.console.deps import ConsoleDeps, PreviewAsk
from roses_app.publish.console.history import PollHistory

__all__ = ["ConsoleDeps", "PollHistory", "PreviewAsk", "console_mount"]
