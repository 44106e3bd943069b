"""Publication: feed documents (RSS 2.0, Atom 1.0, OPML, HTML) and the HTTP server."""

from roses_app.publish.catalog import Catalog, feed_path
from roses_app.publish.pages import render_index, render_opml
from roses_app.publish.render import FeedGroup, FeedInfo, FeedStats, render_atom, render_rss
from roses_app.publish.server import HttpServer, create_app

__all__ = [
    "Catalog",
    "FeedGroup",
    "FeedInfo",
    "FeedStats",
    "HttpServer",
    "create_app",
    "feed_path",
    "render_atom",
    "render_index",
    "render_opml",
    "render_rss",
]
