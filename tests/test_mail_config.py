"""feeds.yaml mail sources: the typed model, defaults, and that passwords stay out.

The mistakes are in ``tests/data/config/bad_mail*.yaml`` (checked by test_config.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from roses_app.config import ImapSettings, MailSource, SmtpSettings, load_config, parse_config
from roses_app.errors import ConfigError

CONFIGS = Path(__file__).resolve().parent / "data" / "config"

GOOD = """\
sources:
  letters: {mail: {maildir: mail/letters}, every: 2m}
  archive: {mail: {mbox: /var/mail/archive}}
  inbox:
    mail:
      imap:
        host: imap.example.org
        user: me@example.org
        password_env: ROSES_IMAP_PASSWORD
        folder: News
        every: 10m
        mark_seen: true
  plain: {mail: {imap: {host: localhost, user: u, password_env: P, security: none}}}
  tls: {mail: {imap: {host: h, user: u, password_env: P, security: starttls, idle: false}}}
  news: {mail: {smtp: {port: 2526, accept: ["news@roses.local", "*@lists.roses.local"]}}}
  one: {mail: {smtp: {host: 0.0.0.0, port: 2527, accept: only@roses.local}}}
  web: {feed: "https://example.org/feed.xml"}
streams:
  s:
    union: [letters, archive, inbox, plain, tls, news, one, web]
    publish: true
"""


def test_mail_sources(tmp_path: Path) -> None:
    config = parse_config(GOOD, tmp_path / "feeds.yaml")
    s = config.sources
    assert s["letters"] == MailSource("letters", "maildir", 120.0, path=tmp_path / "mail/letters")
    assert s["archive"] == MailSource("archive", "mbox", 60.0, path=Path("/var/mail/archive"))
    assert s["inbox"] == MailSource(
        "inbox",
        "imap",
        600.0,
        imap=ImapSettings(
            host="imap.example.org",
            user="me@example.org",
            password_env="ROSES_IMAP_PASSWORD",
            port=993,
            security="ssl",
            folder="News",
            idle=True,
            mark_seen=True,
            delete=False,
        ),
    )
    plain = s["plain"]
    assert isinstance(plain, MailSource) and plain.imap is not None
    assert plain.imap.port == 143 and plain.every_seconds == 300.0 and plain.imap.folder == "INBOX"
    tls = s["tls"]
    assert isinstance(tls, MailSource) and tls.imap is not None
    assert tls.imap.port == 143 and tls.imap.security == "starttls" and not tls.imap.idle
    assert s["news"] == MailSource(
        "news",
        "smtp",
        0.0,
        smtp=SmtpSettings("127.0.0.1", 2526, ("news@roses.local", "*@lists.roses.local")),
    )
    one = s["one"]
    assert isinstance(one, MailSource) and one.smtp == SmtpSettings(
        "0.0.0.0", 2527, ("only@roses.local",)
    )
    assert one.mailbox == "smtp://0.0.0.0:2527"
    assert s["inbox"].mailbox == "imap://me@example.org@imap.example.org:993/News"  # type: ignore[union-attr]
    assert s["letters"].origin.line == 2


def test_home_paths_expand(tmp_path: Path) -> None:
    text = 'sources:\n  m: {mail: {maildir: "~/Maildir"}}\nstreams: {}\n'
    source = parse_config(text, tmp_path / "feeds.yaml").sources["m"]
    assert isinstance(source, MailSource)
    assert source.path == Path.home() / "Maildir"


def test_password_never_quoted(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(CONFIGS / "bad_mail_imap.yaml")
    assert "hunter2" not in str(info.value)
    assert "password_env" in str(info.value)
    text = (
        "sources:\n  a:\n    mail:\n      imap: {host: h, user: u, password_env: P, "
        "passwd: [hunter3], Password: hunter4}\nstreams: {}\n"
    )
    with pytest.raises(ConfigError) as again:
        parse_config(text, tmp_path / "feeds.yaml")
    message = str(again.value)
    assert "hunter3" not in message and "hunter4" not in message
    assert message.count("passwords are never written in feeds.yaml") == 2
