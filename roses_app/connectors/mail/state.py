"""Durable runtime state of the mail sources, in SQLite.

One row per source in ``mail_state``: what it reads (``mailbox``, e.g.
``imap://me@host:993/INBOX``; when it changes the state starts over), the IMAP
folder's UIDVALIDITY and the last UID handed to the sink, the mbox read position
(offset and a hash of the bytes just before it), backoff and counters.  And one row
per message already handed over in ``mail_seen``: its Maildir file name
(``f:NAME``) or its item key (``i:HASH`` of guid and content), so each message
becomes an item once per source, across restarts and UIDVALIDITY changes.  And one
row per guid a mail of the source holds in ``mail_guids``, with the digest of that
mail's item (:mod:`~roses_app.connectors.mail.identity`); these rows outlive a change
of mailbox, so mails read again from the new one keep their guids.

Safe to use from several threads (one connection, one lock); :meth:`commit` writes a
state and its new seen keys in one transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from roses_app.connectors.common import SqliteStore

_SCHEMA = """
CREATE TABLE IF NOT EXISTS mail_state (
    name            TEXT PRIMARY KEY,
    mailbox         TEXT NOT NULL,
    uidvalidity     INTEGER,
    last_uid        INTEGER NOT NULL DEFAULT 0,
    mbox_offset     INTEGER NOT NULL DEFAULT 0,
    mbox_tail       TEXT NOT NULL DEFAULT '',
    failures        INTEGER NOT NULL DEFAULT 0,
    next_allowed_at REAL NOT NULL DEFAULT 0,
    last_status     TEXT NOT NULL DEFAULT '',
    last_error      TEXT NOT NULL DEFAULT '',
    last_attempt_at REAL,
    last_success_at REAL,
    n_polls         INTEGER NOT NULL DEFAULT 0,
    n_ok            INTEGER NOT NULL DEFAULT 0,
    n_errors        INTEGER NOT NULL DEFAULT 0,
    n_items         INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS mail_seen (
    name TEXT NOT NULL,
    key  TEXT NOT NULL,
    PRIMARY KEY (name, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS mail_guids (
    name   TEXT NOT NULL,
    guid   TEXT NOT NULL,
    digest TEXT NOT NULL,
    PRIMARY KEY (name, guid)
) WITHOUT ROWID;
"""


@dataclass(frozen=True)
class MailState:
    """Everything the mail connector remembers about one source."""

    name: str
    mailbox: str
    uidvalidity: int | None = None  # IMAP
    last_uid: int = 0  # IMAP: every UID up to this one was handed over
    mbox_offset: int = 0  # mbox: messages before this byte offset were read
    mbox_tail: str = ""  # mbox: hash of the bytes just before mbox_offset
    failures: int = 0  # consecutive
    next_allowed_at: float = 0.0  # clock seconds; 0 = no backoff
    last_status: str = ""
    last_error: str = ""
    last_attempt_at: float | None = None
    last_success_at: float | None = None
    n_polls: int = 0
    n_ok: int = 0
    n_errors: int = 0
    n_items: int = 0

    def restarted(self, mailbox: str) -> MailState:
        """The state of a source that now reads another mailbox: counters only."""
        return MailState(
            name=self.name,
            mailbox=mailbox,
            n_polls=self.n_polls,
            n_ok=self.n_ok,
            n_errors=self.n_errors,
            n_items=self.n_items,
        )


_COLUMNS = [f.name for f in fields(MailState)]


class MailStateStore(SqliteStore):
    """SQLite-backed :class:`MailState` and seen keys per source (``":memory:"`` works)."""

    def __init__(self, path: str | Path) -> None:
        super().__init__(path, _SCHEMA)

    def load(self, name: str, mailbox: str) -> MailState:
        """The state of ``name``; fresh (and no seen keys) when unknown or when it now
        reads another mailbox."""
        state = self.get(name)
        if state is None:
            return MailState(name=name, mailbox=mailbox)
        if state.mailbox != mailbox:
            fresh = state.restarted(mailbox)
            with self._lock:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    self._db.execute("DELETE FROM mail_seen WHERE name = ?", (name,))
                    self._put(fresh)
                    self._db.execute("COMMIT")
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
            return fresh
        return state

    def get(self, name: str) -> MailState | None:
        with self._lock:
            row = self._db.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM mail_state WHERE name = ?", (name,)
            ).fetchone()
        return None if row is None else MailState(*row)

    def all(self) -> list[MailState]:
        with self._lock:
            rows = self._db.execute(
                f"SELECT {', '.join(_COLUMNS)} FROM mail_state ORDER BY name"
            ).fetchall()
        return [MailState(*row) for row in rows]

    def put(self, state: MailState) -> None:
        with self._lock:
            self._put(state)

    def commit(
        self, state: MailState, seen: Iterable[str] = (), guids: Mapping[str, str] | None = None
    ) -> None:
        """Store ``state``, remember the ``seen`` keys and the ``guids`` (guid -> digest
        of the mail holding it), atomically."""
        keys = [(state.name, key) for key in seen]
        held = [(state.name, guid, digest) for guid, digest in (guids or {}).items()]
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(
                    "INSERT OR IGNORE INTO mail_seen (name, key) VALUES (?, ?)", keys
                )
                self._db.executemany(
                    "INSERT OR IGNORE INTO mail_guids (name, guid, digest) VALUES (?, ?, ?)", held
                )
                self._put(state)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def seen_keys(self, name: str) -> set[str]:
        with self._lock:
            rows = self._db.execute("SELECT key FROM mail_seen WHERE name = ?", (name,)).fetchall()
        return {row[0] for row in rows}

    def guid_owner(self, name: str, guid: str) -> str | None:
        """The digest of the mail of source ``name`` that holds ``guid``, if any."""
        with self._lock:
            row = self._db.execute(
                "SELECT digest FROM mail_guids WHERE name = ? AND guid = ?", (name, guid)
            ).fetchone()
        return None if row is None else str(row[0])

    def delete(self, name: str) -> None:
        with self._lock:
            self._db.execute("DELETE FROM mail_state WHERE name = ?", (name,))
            self._db.execute("DELETE FROM mail_seen WHERE name = ?", (name,))
            self._db.execute("DELETE FROM mail_guids WHERE name = ?", (name,))

    def _put(self, state: MailState) -> None:
        values = asdict(state)
        placeholders = ", ".join("?" for _ in _COLUMNS)
        self._db.execute(
            f"INSERT OR REPLACE INTO mail_state ({', '.join(_COLUMNS)}) VALUES ({placeholders})",
            [values[c] for c in _COLUMNS],
        )
