"""The console's access rules: off by default, a password, sessions in signed cookies,
CSRF and Origin checks on every change, login attempts limited, changes audited."""

from __future__ import annotations

import io
import json
import shutil
import stat
from pathlib import Path

import pytest
from itsdangerous import TimestampSigner
from starlette.testclient import TestClient
from test_console_support import (
    HASH,
    ORIGIN,
    PASSWORD,
    csrf_of,
    login,
    make_env,
    post_form,
    write_config,
)

from roses_app.cli import main
from roses_app.config import parse_config
from roses_app.config.console import (
    ENVIRONMENT,
    hash_password,
    parse_password_hash,
    verify_password,
)
from roses_app.errors import ConfigError
from roses_app.publish.console.guard import LoginLimiter
from roses_app.publish.server import create_app
from roses_app.store import Store


def test_off_by_default_and_404(tmp_path: Path):
    config = write_config(tmp_path, console="")
    assert config.settings.console is None
    with Store(tmp_path / "s.sqlite") as store:
        client = TestClient(create_app(config, store, lambda: {"ok": True}))
        for path in ("/console/", "/console/login", "/console/static/console.js"):
            assert client.get(path).status_code == 404
    off = write_config(tmp_path, console=f"  console: {{enabled: false, password_hash: '{HASH}'}}")
    assert off.settings.console is None


def test_on_its_own_the_console_listens_on_127_0_0_1_and_refuses_other_machines(
    tmp_path: Path,
):
    text = (
        f"settings:\n  data_dir: ./data\n  console: {{password_hash: '{HASH}'}}\n"
        "sources: {a: {feed: 'file:a.xml'}}\n"
        "streams: {b: {filter: {from: a, where: 'true()'}}}\n"
    )
    config = parse_config(text, tmp_path / "feeds.yaml")  # no settings.http at all
    assert config.settings.console is not None
    assert config.settings.http.host == "127.0.0.1"
    assert config.settings.console.allow_remote is False


def test_config_mistakes_at_their_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(ENVIRONMENT, raising=False)
    with pytest.raises(ConfigError) as missing:
        write_config(tmp_path, console="  console: {user: admin}")
    assert "feeds.yaml:4: settings.console needs password_hash" in str(missing.value)
    with pytest.raises(ConfigError) as bad:
        write_config(tmp_path, console="  console:\n    password_hash: 'md5$abc'")
    assert "feeds.yaml:5: settings.console.password_hash: a password hash is scrypt$" in str(
        bad.value
    )
    with pytest.raises(ConfigError) as key:
        write_config(tmp_path, console=f"  console: {{password: x, password_hash: '{HASH}'}}")
    assert "unknown key 'password' in settings.console" in str(key.value)
    monkeypatch.setenv(ENVIRONMENT, HASH)
    config = write_config(tmp_path, console="  console: {user: ops, allow_remote: true}")
    assert config.settings.console is not None
    assert config.settings.console.password_hash == HASH
    assert config.settings.console.user == "ops" and config.settings.console.allow_remote


def test_console_password_command(capsys: pytest.CaptureFixture[str], monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("a long password\n"))
    assert main(["console-password", "--stdin"]) == 0
    printed = capsys.readouterr().out.strip()
    parsed = parse_password_hash(printed)
    assert printed.startswith("scrypt$32768$8$1$") and verify_password("a long password", parsed)
    assert not verify_password("a long passwore", parsed)
    monkeypatch.setattr("sys.stdin", io.StringIO("short\n"))
    assert main(["console-password", "--stdin"]) == 1


def test_login_session_cookie_and_logout(tmp_path: Path):
    env = make_env(tmp_path, write_config(tmp_path))
    client = env.client
    first = client.get("/console/", follow_redirects=False)
    assert first.status_code == 303 and first.headers["location"] == "/console/login"
    page = client.get("/console/login")
    assert 'id="login-form"' in page.text and 'id="login-password"' in page.text
    answer = login(client)
    assert answer.status_code == 303
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/console/" in cookie
    assert "Max-Age=43200" in cookie and "Secure" not in cookie  # http base: not Secure
    overview = client.get("/console/")
    assert overview.status_code == 200 and 'id="overview"' in overview.text
    assert overview.headers["content-security-policy"].startswith(
        "default-src 'none'; script-src 'self'"
    )
    key = env.deps.key_path
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_bytes()) == 32
    out = post_form(client, "/console/logout", {"csrf": csrf_of(overview.text)})
    assert out.status_code == 303
    assert client.get("/console/", follow_redirects=False).status_code == 303
    audit = [json.loads(x) for x in env.deps.audit_path.read_text().splitlines()]
    assert [a["action"] for a in audit] == ["login", "logout"]
    assert audit[0]["user"] == "admin" and audit[0]["address"] == "127.0.0.1"
    assert stat.S_IMODE(env.deps.audit_path.stat().st_mode) == 0o600


def test_secure_cookie_when_base_url_is_https(tmp_path: Path):
    config = write_config(tmp_path)
    text = config.path.read_text().replace(
        "port: 8080}", "port: 8080, base_url: 'https://f.example'}"
    )
    config.path.write_text(text)
    env = make_env(tmp_path, parse_config(text, config.path))
    assert "Secure" in login(env.client).headers["set-cookie"]


def test_wrong_password_is_401_and_counted_then_429(tmp_path: Path):
    env = make_env(tmp_path, write_config(tmp_path))
    for _ in range(4):
        wrong = login(env.client, "not it")
        assert wrong.status_code == 401 and "Wrong password" in wrong.text
    assert login(env.client, "still not").status_code == 401  # the 5th: locked out after
    locked = login(env.client)  # even the right password waits
    assert locked.status_code == 429 and int(locked.headers["retry-after"]) >= 30
    assert "set-cookie" not in locked.headers
    audit = [json.loads(x) for x in env.deps.audit_path.read_text().splitlines()]
    assert [a["failures"] for a in audit] == [1, 2, 3, 4, 5]


def test_lockout_doubles_and_success_forgets():
    now = [0.0]
    limiter = LoginLimiter(clock=lambda: now[0])
    for _ in range(4):
        limiter.failed("a")
    assert limiter.retry_after("a") is None
    limiter.failed("a")
    assert limiter.retry_after("a") == 30.0
    limiter.failed("a")
    assert limiter.retry_after("a") == 60.0
    assert limiter.retry_after("b") is None  # per address
    now[0] = 61.0
    assert limiter.retry_after("a") is None
    limiter.succeeded("a")
    limiter.failed("a")
    assert limiter.retry_after("a") is None


def test_forged_or_expired_cookie_gets_the_login_page(tmp_path: Path, monkeypatch):
    env = make_env(tmp_path, write_config(tmp_path))
    login(env.client)
    good = env.client.cookies.get("roses_console")
    assert good and env.client.get("/console/sources").status_code == 200
    env.client.cookies.set("roses_console", good[:-4] + "AAAA", path="/console/")
    forged = env.client.get("/console/sources", follow_redirects=False)
    assert forged.status_code == 303 and forged.headers["location"] == "/console/login"
    env.client.cookies.set("roses_console", good, path="/console/")
    # a day later, when sessions last 12 hours
    real = TimestampSigner.get_timestamp
    monkeypatch.setattr(TimestampSigner, "get_timestamp", lambda self: real(self) + 86400)
    page = env.client.get("/console/sources")
    assert page.status_code == 200 and 'id="login-form"' in page.text


@pytest.mark.parametrize(
    "headers, token",
    [
        ({}, "good"),  # no Origin, no Referer
        ({"Origin": "https://evil.example"}, "good"),
        ({"Origin": "null"}, "good"),
        ({"Referer": "https://evil.example/page"}, "good"),
        ({"Origin": ORIGIN}, None),  # no token
        ({"Origin": ORIGIN}, "wrong"),
    ],
)
def test_forged_posts_are_403_and_change_nothing(tmp_path: Path, headers, token):
    env = make_env(tmp_path, write_config(tmp_path))
    login(env.client)
    csrf = csrf_of(env.client.get("/console/editor").text)
    fields = {"name": "quake", "kind": "where", "source": "guardian", "text": "true()"}
    if token is not None:
        fields["csrf"] = csrf if token == "good" else "x" * len(csrf)
    answer = env.client.post("/console/apply", data=fields, headers=headers, follow_redirects=False)
    assert answer.status_code == 403
    preview = env.client.post(
        "/console/preview",
        json=fields,
        headers={**headers, **({"X-CSRF-Token": fields["csrf"]} if "csrf" in fields else {})},
    )
    assert preview.status_code == 403
    assert env.engine.applied == [] and env.engine.previews == [] and env.engine.reloads == []
    # the same request from the console's page goes through
    fields["csrf"] = csrf
    assert post_form(env.client, "/console/apply", fields).status_code == 200
    assert [a[1] for a in env.engine.applied] == ["quake"]


def test_cross_site_login_refused(tmp_path: Path):
    env = make_env(tmp_path, write_config(tmp_path))
    assert login(env.client, Origin="https://evil.example").status_code == 403
    assert env.client.post("/console/login", data={"password": PASSWORD}).status_code == 403


def test_remote_refused_unless_allowed(tmp_path: Path):
    wild = write_config(tmp_path, host="0.0.0.0")
    env = make_env(tmp_path, wild)
    refused = env.client.get("/console/login")
    assert refused.status_code == 403 and "allow_remote" in refused.text
    assert login(env.client).status_code == 403
    remote = make_env(tmp_path / "r", write_config(tmp_path / "r"), client="192.0.2.7")
    assert remote.client.get("/console/login").status_code == 403
    # another name for this machine's address (DNS rebinding) is refused too
    rebound = make_env(tmp_path / "h", write_config(tmp_path / "h"))
    assert rebound.client.get("/console/login", headers={"Host": "evil.example"}).status_code == 403
    allowed = write_config(
        tmp_path / "a", host="0.0.0.0",
        console=f"  console: {{password_hash: '{HASH}', allow_remote: true}}",
    )  # fmt: skip
    env = make_env(tmp_path / "a", allowed, client="192.0.2.7")
    assert env.client.get("/console/login").status_code == 200
    assert login(env.client).status_code == 303


def test_a_new_password_ends_sessions(tmp_path: Path):
    env = make_env(tmp_path, write_config(tmp_path))
    login(env.client)
    cookie = env.client.cookies.get("roses_console")
    assert cookie is not None
    new_hash = hash_password("another password", n=16)
    other = write_config(tmp_path / "o", console=f"  console: {{password_hash: '{new_hash}'}}")
    data = other.settings.data_dir
    data.mkdir(parents=True)
    shutil.copy2(env.deps.key_path, data / "console_secret.key")  # the same key
    env2 = make_env(tmp_path / "o", other)
    env2.client.cookies.set("roses_console", cookie, path="/console/")
    assert env2.client.get("/console/", follow_redirects=False).status_code == 303


def test_a_logged_out_cookie_replayed_is_refused(tmp_path: Path):
    env = make_env(tmp_path, write_config(tmp_path))
    login(env.client)
    cookie = env.client.cookies.get("roses_console")
    assert cookie is not None
    # another browser, still logged in
    other = TestClient(env.client.app, base_url=ORIGIN, client=("127.0.0.1", 50001))
    login(other)
    csrf = csrf_of(env.client.get("/console/").text)
    assert post_form(env.client, "/console/logout", {"csrf": csrf}).status_code == 303
    env.client.cookies.set("roses_console", cookie, path="/console/")  # a copy kept
    replayed = env.client.get("/console/sources", follow_redirects=False)
    assert replayed.status_code == 303 and replayed.headers["location"] == "/console/login"
    assert post_form(env.client, "/console/logout", {"csrf": csrf}).status_code == 403
    assert other.get("/console/sources").status_code == 200  # that one only
    # the list survives a restart (it is with the daemon's state, not in memory)
    again = make_env(tmp_path, write_config(tmp_path))
    again.client.cookies.set("roses_console", cookie, path="/console/")
    assert again.client.get("/console/", follow_redirects=False).status_code == 303
    audit = [json.loads(x)["action"] for x in env.deps.audit_path.read_text().splitlines()]
    assert audit == ["login", "login", "logout"]


@pytest.mark.parametrize(
    "fields, headers",
    [({}, {}), ({"csrf": "x" * 43}, {}), ({"csrf": "good"}, {"Origin": "https://e.example"})],
)
def test_logout_needs_the_csrf_token_and_this_site(tmp_path: Path, fields, headers):
    """A cross-site page cannot log the console out (nor out everywhere)."""
    env = make_env(tmp_path, write_config(tmp_path))
    login(env.client)
    csrf = csrf_of(env.client.get("/console/").text)
    sent = {k: csrf if v == "good" else v for k, v in fields.items()}
    for extra in ({}, {"everywhere": "1"}):
        answer = post_form(env.client, "/console/logout", {**sent, **extra}, **headers)
        assert answer.status_code == 403
    assert env.client.get("/console/sources").status_code == 200  # still logged in
    assert (
        not (env.deps.data_dir / "console_sessions.json").exists()
        or json.loads((env.deps.data_dir / "console_sessions.json").read_text())["ended"] == {}
    )


def test_log_out_everywhere(tmp_path: Path):
    env = make_env(tmp_path, write_config(tmp_path))
    login(env.client)
    other = TestClient(env.client.app, base_url=ORIGIN, client=("127.0.0.1", 50001))
    login(other)
    page = env.client.get("/console/")
    assert 'id="logout-everywhere"' in page.text
    out = post_form(env.client, "/console/logout", {"csrf": csrf_of(page.text), "everywhere": "1"})
    assert out.status_code == 303
    for client in (env.client, other):
        assert client.get("/console/", follow_redirects=False).status_code == 303
    assert login(other).status_code == 303  # a new login works
    assert other.get("/console/sources").status_code == 200
    audit = [json.loads(x) for x in env.deps.audit_path.read_text().splitlines()]
    assert audit[-2]["action"] == "logout everywhere" and audit[-2]["generation"] == 1
    path = env.deps.data_dir / "console_sessions.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_console_password_with_a_config_ends_every_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
):
    """`roses console-password -c feeds.yaml` while the daemon runs: its sessions end at
    once (the daemon reads the file again when it changes)."""
    env = make_env(tmp_path, write_config(tmp_path))
    login(env.client)
    assert env.client.get("/console/sources").status_code == 200
    monkeypatch.chdir(tmp_path)  # (data_dir is relative to feeds.yaml's folder)
    monkeypatch.setattr("sys.stdin", io.StringIO("a new long password\n"))
    assert main(["console-password", "--stdin", "-c", str(env.config.path)]) == 0
    printed = capsys.readouterr()
    assert printed.out.startswith("scrypt$") and "ended (generation 1)" in printed.err
    refused = env.client.get("/console/sources", follow_redirects=False)
    assert refused.status_code == 303


def test_a_password_changed_by_a_reload_ends_sessions_at_once(tmp_path: Path):
    from roses_app.daemon_reload import differences

    config = write_config(tmp_path)
    env = make_env(tmp_path, config)
    login(env.client)
    cookie = env.client.cookies.get("roses_console")
    new_hash = hash_password("another password", n=16)
    text = config.path.read_text().replace(HASH, new_hash)
    found = differences(config, parse_config(text, config.path), "test")
    assert found.result.needs_restart == ()  # a new password needs no restart
    assert found.config.settings.console is not None
    assert found.config.settings.console.password_hash == new_hash
    env.current[0] = found.config  # what the daemon's reload does
    env.client.cookies.set("roses_console", cookie, path="/console/")
    assert env.client.get("/console/", follow_redirects=False).status_code == 303
    assert login(env.client).status_code == 401  # the old password is refused
    assert login(env.client, "another password").status_code == 303
    # back to the old password: the sessions of before stay ended (a new generation)
    env.current[0] = config
    env.client.cookies.set("roses_console", cookie, path="/console/")
    assert env.client.get("/console/", follow_redirects=False).status_code == 303
    # anything else in settings.console still needs a restart
    other = text.replace(f"password_hash: '{new_hash}'", f"password_hash: '{HASH}', user: ops")
    assert differences(config, parse_config(other, config.path), "t").result.needs_restart == (
        "settings.console",
    )
