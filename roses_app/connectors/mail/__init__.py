"""Mail connector: IMAP, Maildir, mbox and inbound SMTP sources become item streams.

Data flow 1 of DESIGN.md, for ``sources: NAME: {mail: ...}``: :class:`MailConnectors`
runs every mail source of a config (polls for Maildir and mbox, one IDLE/polling
thread per IMAP folder, one aiosmtpd server per SMTP source); :class:`MailPoller`
reads new messages, :func:`xmlize_message` turns each into a canonical ``<item>``,
and the sink (the spool) gets ``(source, [(xml, published µs | None), ...])``, as
from the feed connector.  What was read is remembered in a :class:`MailStateStore`
(SQLite).  Nothing here imports pyspark.
"""

from roses_app.connectors.mail.imap import ImapError, ImapSession
from roses_app.connectors.mail.maildir import NotAMailboxError, read_maildir
from roses_app.connectors.mail.mbox import read_mbox
from roses_app.connectors.mail.poller import MailPoller, MailSourceError
from roses_app.connectors.mail.scheduler import MailConnectors
from roses_app.connectors.mail.smtp import SmtpServer, accepts
from roses_app.connectors.mail.state import MailState, MailStateStore
from roses_app.connectors.mail.xmlize import message_hash, xmlize_message

__all__ = [
    "ImapError",
    "ImapSession",
    "MailConnectors",
    "MailPoller",
    "MailSourceError",
    "MailState",
    "MailStateStore",
    "NotAMailboxError",
    "SmtpServer",
    "accepts",
    "message_hash",
    "read_maildir",
    "read_mbox",
    "xmlize_message",
]
