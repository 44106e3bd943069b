"""The output store's SQLite schema and statements (:mod:`roses_app.store`)."""

from __future__ import annotations

SCHEMA_VERSION = 1
# batch ids remembered per query (Spark keeps 100 batches of metadata by default)
KEEP_BATCHES = 100

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS entries (
    stream     TEXT    NOT NULL,
    part       TEXT    NOT NULL,
    guid       TEXT    NOT NULL,
    ts         INTEGER NOT NULL,
    seq        INTEGER NOT NULL,
    item       TEXT    NOT NULL,
    created_at REAL    NOT NULL,
    updated_at REAL    NOT NULL,
    PRIMARY KEY (stream, part, guid)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS entries_newest ON entries (stream, part, ts DESC, seq DESC);
CREATE TABLE IF NOT EXISTS feeds (
    stream     TEXT NOT NULL,
    part       TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (stream, part)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS positions (
    query_id TEXT    PRIMARY KEY,
    seq      INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS versions (
    stream      TEXT PRIMARY KEY,
    fingerprint TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batches (
    query_id   TEXT    NOT NULL,
    batch_id   INTEGER NOT NULL,
    applied_at REAL    NOT NULL,
    rows       INTEGER NOT NULL,
    PRIMARY KEY (query_id, batch_id)
) WITHOUT ROWID;
"""


UPSERT = """
INSERT INTO entries(stream, part, guid, ts, seq, item, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT(stream, part, guid) DO UPDATE SET
    ts = excluded.ts, seq = excluded.seq, item = excluded.item, updated_at = excluded.updated_at
WHERE (excluded.ts > entries.ts OR (excluded.ts = entries.ts AND excluded.seq >= entries.seq))
  AND NOT (excluded.ts = entries.ts AND excluded.seq = entries.seq AND excluded.item = entries.item)
"""
