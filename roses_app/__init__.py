"""ROSES: a continuous query engine for RSS/Atom feeds and mail."""

__version__ = "0.1.0"
