"""``sources: NAME: {mail: ...}`` → :class:`~roses_app.config.model.MailSource`.

Four kinds, exactly one per source::

    letters: {mail: {maildir: ~/Mail/newsletters}, every: 1m}
    archive: {mail: {mbox: mail/archive.mbox}}
    inbox:   {mail: {imap: {host: imap.example.org, user: me, password_env: ROSES_IMAP_PW,
                            port: 993, security: ssl, folder: INBOX, idle: true, every: 5m,
                            mark_seen: false, delete: false}}}
    news:    {mail: {smtp: {host: 127.0.0.1, port: 2525, accept: ["news@roses.local"]}}}

Paths resolve against the config file's folder.  A password is never read from the
file: ``password_env`` names the environment variable that holds it, read when the
source connects.  A ``password:`` key is refused, and its value never appears in a
message.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import cast

from roses_app.algebra.plan.operators import Origin
from roses_app.config.fields import Problems, Section, listing, on_this_machine
from roses_app.config.model import ImapSecurity, ImapSettings, MailKind, MailSource, SmtpSettings
from roses_app.config.settings import local_path
from roses_app.config.yamlmarks import Marked, describe

MAIL_KINDS: tuple[MailKind, ...] = ("imap", "maildir", "mbox", "smtp")
SECURITY: tuple[ImapSecurity, ...] = ("ssl", "starttls", "none")
IMAP_KEYS = (
    "host",
    "port",
    "security",
    "user",
    "password_env",
    "folder",
    "idle",
    "every",
    "mark_seen",
    "delete",
)
SMTP_KEYS = ("host", "port", "accept")
DEFAULT_EVERY = {"imap": 300.0, "maildir": 60.0, "mbox": 60.0, "smtp": 0.0}
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SECRET_KEYS = ("password", "pass", "passwd", "secret")


def mail_source(
    problems: Problems,
    name: str,
    value: Marked,
    line: int,
    base_dir: Path,
    smtp_ports: dict[tuple[str, int], str],
) -> MailSource | None:
    """The mail source ``name`` (a mapping holding ``mail``), or None after reporting.

    ``smtp_ports`` maps the (host, port) of the smtp sources read so far to their
    names, so that two sources listening on one port are reported.
    """
    what = f"sources.{name}"
    s = Section(problems, value, what, required=("mail",), optional=("every", "time"), line=line)
    mail = s.get("mail")
    if mail is None:
        return None
    m = Section(problems, mail, f"{what}.mail", optional=MAIL_KINDS, line=s.key_line("mail"))
    if not m.ok:
        return None
    kinds = [k for k in MAIL_KINDS if k in m]
    if len(kinds) != 1:
        if kinds or not m.values:  # (only unknown keys: each is reported already)
            got = " and ".join(kinds) if kinds else "none of them"
            problems.add(
                mail.line,
                f"{what}.mail must have exactly one of {listing(list(MAIL_KINDS))} "
                f"(one mailbox per source), got {got}",
            )
        return None
    kind = kinds[0]
    origin = Origin(problems.file, line, "", f"source:{name}")
    every = s.duration("every", DEFAULT_EVERY[kind])
    if kind == "smtp" and "every" in s:
        problems.add(
            s.key_line("every"),
            f"{what}.every does not apply to smtp sources (mail is pushed to them); remove it",
        )
    node = m.values[kind]

    if kind in ("maildir", "mbox"):
        path = m.string(kind, None)
        if path is None:
            return None
        s.check_poll_floor("every", local=True)
        return MailSource(name, kind, every, path=local_path(path, base_dir), origin=origin)

    if kind == "imap":
        imap, every = _imap_source(s, node, m.key_line("imap"), every)
        return None if imap is None else MailSource(name, kind, every, imap=imap, origin=origin)

    smtp = _smtp(problems, f"{what}.mail.smtp", node, m.key_line("smtp"))
    if smtp is None:
        return None
    other = smtp_ports.get((smtp.host, smtp.port))
    if other is not None:
        problems.add(
            m.key_line("smtp"),
            f"{what}.mail.smtp: port {smtp.port} on {smtp.host} is already the smtp "
            f"source {other!r}; give each smtp source its own port",
        )
        return None
    smtp_ports[(smtp.host, smtp.port)] = name
    return MailSource(name, kind, every, smtp=smtp, origin=origin)


def _imap_source(
    s: Section, node: Marked, line: int, every: float
) -> tuple[ImapSettings | None, float]:
    """The IMAP settings of source section ``s`` (None after reporting), and its
    interval: ``every`` of the source, or of ``mail.imap``."""
    imap, imap_every = _imap(s.problems, f"{s.what}.mail.imap", node, line)
    if imap_every is not None:
        if "every" in s:
            s.problems.add(
                s.key_line("every"),
                f"{s.what}: every is given twice (here and in mail.imap.every); keep one",
            )
        every = imap_every
    if imap is not None:
        s.check_poll_floor("every", local=on_this_machine(imap.host))
    return imap, every


def _imap(
    problems: Problems, what: str, node: Marked, line: int
) -> tuple[ImapSettings | None, float | None]:
    if node.is_map:
        secrets = [k for k in node.value if k.lower() in _SECRET_KEYS]
        for key in secrets:
            problems.add(
                node.key_line(key),
                f"{what}.{key}: passwords are never written in feeds.yaml; put the password "
                "in an environment variable and give its name as password_env",
            )
        if secrets:  # read the rest without the secret, so no message can quote it
            kept = {k: v for k, v in node.value.items() if k not in secrets}
            node = Marked(kept, node.line, dict(node.key_lines))
    s = Section(
        problems,
        node,
        what,
        required=("host", "user", "password_env"),
        optional=IMAP_KEYS,
        line=line,
        order=IMAP_KEYS,
    )
    if not s.ok:
        return None, None
    n_problems = len(problems)
    security_text = s.string("security", "ssl")
    if security_text not in SECURITY:
        problems.add(
            s.values["security"].line,
            f"{what}.security must be one of {listing(list(SECURITY))}, "
            f"got {describe(s.values['security'])}",
        )
        security_text = "ssl"
    security = cast(ImapSecurity, security_text)
    port = s.integer("port", 993 if security == "ssl" else 143, minimum=1, maximum=65535)
    host = s.string("host", None)
    user = s.string("user", None)
    password_env = s.string("password_env", None)
    if password_env is not None and not _ENV_NAME.fullmatch(password_env):
        problems.add(
            s.values["password_env"].line,
            f"{what}.password_env must be the name of an environment variable "
            f"(letters, digits and _), got {describe(s.values['password_env'])}",
        )
    folder = s.string("folder", "INBOX")
    idle = s.boolean("idle", True)
    every = s.duration("every", None)
    s.check_poll_floor("every", local=on_this_machine(host))
    mark_seen = s.boolean("mark_seen", False)
    delete = s.boolean("delete", False)
    if len(problems) > n_problems or host is None or user is None or password_env is None:
        return None, every
    settings = ImapSettings(
        host=host,
        user=user,
        password_env=password_env,
        port=port,
        security=security,
        folder=folder,
        idle=idle,
        mark_seen=mark_seen,
        delete=delete,
    )
    return settings, every


def _smtp(problems: Problems, what: str, node: Marked, line: int) -> SmtpSettings | None:
    d = SmtpSettings()
    s = Section(
        problems, node, what, required=("accept",), optional=SMTP_KEYS, line=line, order=SMTP_KEYS
    )
    if not s.ok:
        return None
    n_problems = len(problems)
    host = s.string("host", d.host)
    port = s.integer("port", d.port, minimum=1, maximum=65535)
    accept: list[str] = []
    value = s.get("accept")
    if value is not None:
        if isinstance(value.value, str):
            value = Marked([value], value.line)  # one pattern alone is a list of one
        if not value.is_seq:
            s.bad(
                "accept", "a list of address patterns (e.g. ['news@roses.local', '*@lists.local'])"
            )
        elif not value.value:
            problems.add(value.line, f"{what}.accept must list at least one address pattern")
        for item in value.value if value.is_seq else []:
            if not isinstance(item.value, str) or not item.value.strip():
                problems.add(
                    item.line,
                    f"{what}.accept: an address pattern must be a non-empty string such as "
                    f"'news@roses.local' or '*@roses.local', got {describe(item)}",
                )
            elif any(c.isspace() for c in item.value.strip()):
                problems.add(
                    item.line,
                    f"{what}.accept: an address pattern has no spaces, got {describe(item)}",
                )
            else:
                accept.append(item.value.strip())
    if len(problems) > n_problems:
        return None
    return SmtpSettings(host=host, port=port, accept=tuple(accept))
