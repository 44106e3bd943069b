"""The console's routes, under ``/console/`` (see the package docstring), behind its
access rules (:mod:`.access`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import anyio
import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route

from roses_app.config.console import PasswordHash, parse_password_hash, verify_password
from roses_app.errors import RosesError
from roses_app.publish.console import access
from roses_app.publish.console.access import Session, Sessions
from roses_app.publish.console.deps import ConsoleDeps
from roses_app.publish.console.editor import (
    EditorError,
    check_name,
    confirm_body,
    editor_body,
    outcome_lines,
    preview_ask,
    problems_of,
    reload_text,
    stream_yaml,
)
from roses_app.publish.console.guard import Audit, LoginLimiter
from roses_app.publish.console.layout import HEADERS, esc, notice, page
from roses_app.publish.console.plansvg import streams_by_source
from roses_app.publish.console.revoke import RevocationError, Revocations
from roses_app.publish.console.sourcepages import FIRST_WAIT, source_body, sources_body
from roses_app.publish.console.streampages import stream_body, streams_body

log = logging.getLogger("roses_app.publish.console")

MAX_BODY = 256 * 1024
STATIC = Path(__file__).parent / "static"
STATIC_TYPES = {"console.css": "text/css", "console.js": "text/javascript"}
Handler = Callable[[Request, Session], Awaitable[Response]]
ListingBody = Callable[[ConsoleDeps, Mapping[str, str]], list[str]]
OneBody = Callable[[ConsoleDeps, str], "list[str] | None"]  # None: no such name


class BodyTooLarge(RosesError, ValueError):
    """A request body over MAX_BODY."""


async def read_fields(request: Request) -> dict[str, Any]:
    """A POST's fields: a JSON object, or a urlencoded form (the last of a name)."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise BodyTooLarge(f"a request body is at most {MAX_BODY:,} bytes")
    if request.headers.get("content-type", "").startswith("application/json"):
        try:
            data = orjson.loads(body or b"{}")
        except orjson.JSONDecodeError:
            raise EditorError("the body is not JSON") from None
        if not isinstance(data, dict):
            raise EditorError("the body must be a JSON object")
        return data
    return dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))


class Console:
    """The console's request handlers over ``deps``."""

    def __init__(self, deps: ConsoleDeps) -> None:
        self.deps = deps
        self.settings = deps.settings
        written = deps.settings.password_hash
        self._password = (written, parse_password_hash(written))
        base = deps.config().settings.http.base_url or ""
        key = access.signing_key(deps.key_path)
        self.sessions = Sessions(key, deps.settings, base.lower().startswith("https:"),
                                 Revocations.of(deps.data_dir), self.password_hash)  # fmt: skip
        self.limiter = LoginLimiter()
        self.audit = Audit(deps.audit_path)
        self.hashing = anyio.CapacityLimiter(2)  # scrypt: 32 MB and 0.1 s each
        self.previews = anyio.CapacityLimiter(1)
        self.changes = anyio.CapacityLimiter(1)  # one edit of feeds.yaml at a time
        self.static = {name: (STATIC / name).read_bytes() for name in STATIC_TYPES}

    def password_hash(self) -> str:
        """The console's password hash now: a reload takes a new one at once (and
        every session of the old one ends)."""
        console = self.deps.config().settings.console
        return (console or self.settings).password_hash

    def password(self) -> PasswordHash:
        text = self.password_hash()
        if text != self._password[0]:
            self._password = (text, parse_password_hash(text))  # (checked by the config)
        return self._password[1]

    # -- the rules every request meets ---------------------------------------------------

    def _refused(self, request: Request) -> Response | None:
        why = access.refusal(request, self.settings, self.deps.config().settings.http)
        if why is None:
            return None
        return page("Not here", [notice(why, "error")], status=403)

    def guarded(self, handler: Handler, *, change: bool = False) -> Callable[[Request], Any]:
        """``handler`` behind the rules: a session (else the login page), and for a
        change this site's Origin and the session's CSRF token (else 403)."""

        async def endpoint(request: Request) -> Response:
            refused = self._refused(request)
            if refused is not None:
                return refused
            session = self.sessions.read(request)
            if change:
                why = self._forged(request, session)
                if why is not None:
                    log.warning("console: %s refused from %s: %s", request.url.path,
                                access.client_address(request), why)  # fmt: skip
                    return _refusal(request, why)
            if session is None:
                return RedirectResponse("/console/login", status_code=303, headers=HEADERS)
            return await handler(request, session)

        return endpoint

    def _forged(self, request: Request, session: Session | None) -> str | None:
        if not access.same_site(request, self.deps.config().settings.http):
            return "not sent from the console's own pages (Origin/Referer)"
        if session is None:
            return "no session: log in first"
        token = request.headers.get(access.CSRF_HEADER)
        if token is None:
            token = request.state.fields.get(access.CSRF_FIELD) if _has_fields(request) else None
        if not access.csrf_ok(session, token if isinstance(token, str) else None):
            return "the form's CSRF token is missing or wrong: reload the page"
        return None

    # -- login ---------------------------------------------------------------------------

    async def login_page(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        if self.sessions.read(request) is not None:
            return RedirectResponse("/console/", status_code=303, headers=HEADERS)
        return _login_page()

    async def login(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        address = access.client_address(request)
        if not access.same_site(request, self.deps.config().settings.http):
            return _refusal(request, "not sent from the console's own pages (Origin/Referer)")
        wait = self.limiter.retry_after(address)
        if wait is not None:
            return _login_page("Too many failed logins: wait and try again.", 429,
                               {"Retry-After": str(int(wait) + 1)})  # fmt: skip
        password = str(request.state.fields.get("password", ""))[:1024]
        ok = await anyio.to_thread.run_sync(verify_password, password, self.password(),
                                            limiter=self.hashing)  # fmt: skip
        user = self.settings.user
        if not ok:
            failures = self.limiter.failed(address)
            self.audit.record(user, address, "login refused", failures=failures)
            return _login_page("Wrong password.", 401)
        self.limiter.succeeded(address)
        try:
            _, value = self.sessions.new(user)
        except RevocationError as exc:
            log.error("console: %s", exc)
            return _login_page(f"No session can be made: {exc}", 500)
        self.audit.record(user, address, "login")
        response = RedirectResponse("/console/", status_code=303, headers=HEADERS)
        response.set_cookie(**self.sessions.cookie(value))  # type: ignore[arg-type]
        return response

    async def logout(self, request: Request, session: Session) -> Response:
        """End this session (its cookie, replayed, is refused), or with the field
        ``everywhere`` every session made so far."""
        address = access.client_address(request)
        if request.state.fields.get("everywhere"):
            generation = await anyio.to_thread.run_sync(self.sessions.end_all)
            self.audit.record(session.user, address, "logout everywhere", generation=generation)
        else:
            await anyio.to_thread.run_sync(self.sessions.end, session)
            self.audit.record(session.user, address, "logout")
        response = RedirectResponse("/console/login", status_code=303, headers=HEADERS)
        response.delete_cookie(access.COOKIE, path=access.COOKIE_PATH, httponly=True,
                               samesite="strict", secure=self.sessions.secure)  # fmt: skip
        return response

    async def static_file(self, request: Request) -> Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        name = request.path_params["name"]
        if name not in self.static:
            return Response("Not found.\n", status_code=404, media_type="text/plain")
        return Response(self.static[name], media_type=STATIC_TYPES[name],
                        headers={"Cache-Control": "no-cache"})  # fmt: skip

    # -- pages ---------------------------------------------------------------------------

    async def overview(self, request: Request, session: Session) -> Response:
        body = await anyio.to_thread.run_sync(self._overview, session.csrf)
        return page("Overview", body, csrf=session.csrf)

    def _overview(self, csrf: str) -> list[str]:
        config = self.deps.config()
        queries = self.deps.queries()
        published = sum(1 for s in config.streams.values() if s.published)
        counts = {}
        for status in ("ok", "not_modified", "error", "gone", "never"):
            found = self.deps.sources({"status": status, "per_page": "1"}, first_wait=FIRST_WAIT)
            if found.get("reading"):  # the daemon has just started (once read, kept)
                break
            counts[status] = found["total"]
        statuses = ", ".join(f"{n:,} {s}" for s, n in counts.items() if n)
        if found.get("reading"):
            statuses = "their rows being read"
        return [
            '<dl class="facts" id="overview">',
            f"<dt>Config</dt><dd>{esc(str(config.path))}</dd>",
            f'<dt>Sources</dt><dd><a href="/console/sources">{len(config.sources):,}</a>'
            f" ({esc(statuses) or 'none polled yet'})</dd>",
            f'<dt>Streams</dt><dd><a href="/console/streams">{len(config.streams):,}</a>'
            f" ({published:,} published)</dd>",
            f"<dt>Spark queries</dt><dd>{len(set(queries.values())):,} running "
            f"{len(queries):,} streams</dd>",
            "</dl>",
            '<p><a href="/console/editor" id="new-stream">Write a new stream</a></p>',
            '<form method="post" action="/console/logout" class="everywhere">'
            f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
            '<input type="hidden" name="everywhere" value="1">'
            '<button type="submit" id="logout-everywhere">Log out everywhere</button> '
            '<span class="meta">ends every session of the console, on every browser '
            "(this one too)</span></form>",
        ]

    async def _listing(
        self, request: Request, session: Session, title: str, body_of: ListingBody
    ) -> Response:
        """A paged list (sources, streams); a bad query is a 400 saying why."""
        params = dict(request.query_params)
        try:
            body = await anyio.to_thread.run_sync(body_of, self.deps, params)
        except ValueError as exc:
            return page(title, [notice(str(exc), "error")], csrf=session.csrf, status=400)
        return page(title, body, csrf=session.csrf)

    async def _one(
        self, request: Request, session: Session, kind: str, body_of: OneBody
    ) -> Response:
        """One source's or stream's page; 404 for a name the config does not have."""
        name = request.path_params["name"]
        body = await anyio.to_thread.run_sync(body_of, self.deps, name)
        if body is None:
            return page(f"No such {kind}", [notice(f"No {kind} has this name.")],
                        csrf=session.csrf, status=404)  # fmt: skip
        return page(f"{kind.capitalize()} {name}", body, csrf=session.csrf)

    async def sources(self, request: Request, session: Session) -> Response:
        return await self._listing(request, session, "Sources", sources_body)

    async def source(self, request: Request, session: Session) -> Response:
        return await self._one(request, session, "source", source_body)

    async def streams(self, request: Request, session: Session) -> Response:
        return await self._listing(request, session, "Streams", streams_body)

    async def stream(self, request: Request, session: Session) -> Response:
        return await self._one(request, session, "stream", stream_body)

    async def editor(self, request: Request, session: Session) -> Response:
        body = editor_body(self.deps.config(), dict(request.query_params), session.csrf)
        if self.deps.preview is None:
            body.insert(0, notice("The preview is not available in this ROSES.", "error"))
        return page("Editor", body, csrf=session.csrf)

    # -- changes -------------------------------------------------------------------------

    async def preview(self, request: Request, session: Session) -> Response:
        run = self.deps.preview
        if run is None:
            return JSONResponse({"error": "the preview is not available"}, status_code=503)
        try:
            ask = preview_ask(request.state.fields)
            result = await anyio.to_thread.run_sync(run, ask, limiter=self.previews)
        except RosesError as exc:
            problems = [{"message": p, "line": None, "column": None} for p in problems_of(exc)]
            return JSONResponse({"problems": problems, "items": []}, status_code=400)
        return JSONResponse(result.to_json(), headers={"Cache-Control": "no-store"})

    async def apply(self, request: Request, session: Session) -> Response:
        fields: dict[str, Any] = request.state.fields
        action = fields.get("action", "apply")
        config = self.deps.config()
        try:
            name = check_name(str(fields.get("name", "")))
            if action == "remove":
                if name not in config.streams:
                    raise EditorError(f"there is no stream {name} to remove")
                return page(f"Remove {name}?", confirm_body(config, name, session.csrf),
                            csrf=session.csrf)  # fmt: skip
            body = None if action == "confirm-remove" else stream_yaml(fields)
        except EditorError as exc:
            return self._not_applied(request, session, fields, [str(exc)], 400)
        return await self._change(request, session, fields, name, body)

    async def _change(
        self, request: Request, session: Session, fields: dict[str, Any], name: str,
        body: str | None,
    ) -> Response:  # fmt: skip
        apply, reload = self.deps.apply, self.deps.reload
        if apply is None:
            return self._not_applied(request, session, fields, ["applying is not available"], 503)
        path = self.deps.config().path
        address, what = access.client_address(request), "remove" if body is None else "apply"
        # recorded before it is done: a change the audit log cannot hold is not made
        self.audit.record(session.user, address, f"{what} requested", stream=name, body=body)
        async with self.changes:
            try:
                applied = await anyio.to_thread.run_sync(apply, path, name, body)
            except RosesError as exc:
                problems = problems_of(exc)
                self.audit.record(session.user, address, f"{what} refused", stream=name,
                                  problems=problems)  # fmt: skip
                return self._not_applied(request, session, fields, problems, 422)
            self.audit.record(session.user, address, f"{what} done", stream=name,
                              file=str(getattr(applied, "path", path)),
                              backup=str(getattr(applied, "backup", "")))  # fmt: skip
            reloaded = None
            if reload is not None:
                reason = f"console: {session.user} ({address}) {what} stream {name}"
                reloaded = await anyio.to_thread.run_sync(reload, reason)
                self.audit.record(session.user, address, "reload", result=reload_text(reloaded))
        if _wants_json(request):
            said = None if reloaded is None else reload_text(reloaded)
            return JSONResponse({"applied": True, "stream": name, "removed": body is None,
                                 "reload": said})  # fmt: skip
        title = f"Removed {name}" if body is None else f"Applied {name}"
        lines = outcome_lines(applied, reloaded)
        if body is not None:
            lines.append(f'<p><a href="/console/streams/{esc(name)}">The stream\'s page</a></p>')
        return page(title, lines, csrf=session.csrf)

    def _not_applied(
        self, request: Request, session: Session, fields: dict[str, Any], problems: list[str],
        status: int,
    ) -> Response:  # fmt: skip
        if _wants_json(request):
            return JSONResponse({"applied": False, "problems": problems}, status_code=status)
        params = {k: str(v) for k, v in fields.items() if k != "csrf"}
        body = editor_body(self.deps.config(), params, session.csrf, problems)
        return page("Editor", body, csrf=session.csrf, status=status)


def _has_fields(request: Request) -> bool:
    return hasattr(request.state, "fields")


def _wants_json(request: Request) -> bool:
    return "application/json" in request.headers.get("accept", "") or request.headers.get(
        "content-type", ""
    ).startswith("application/json")


def _refusal(request: Request, why: str) -> Response:
    if _wants_json(request):
        return JSONResponse({"error": why}, status_code=403)
    return page("Refused", [notice(why, "error")], status=403)


def _login_page(
    message: str | None = None, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    body = [notice(message, "error")] if message else []
    body.append(
        '<form method="post" action="/console/login" id="login-form" class="login">'
        '<label>Password <input type="password" name="password" id="login-password"'
        ' autocomplete="current-password" required autofocus></label>'
        '<button type="submit" id="login-button">Log in</button></form>'
    )
    return page("Log in", body, status=status, headers=headers)


def with_fields(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Any]:
    """Read a POST's fields first (so that the CSRF check finds the form's token)."""

    async def endpoint(request: Request) -> Response:
        try:
            request.state.fields = await read_fields(request)
        except BodyTooLarge as exc:
            return Response(f"{exc}\n", status_code=413, media_type="text/plain")
        except EditorError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return await handler(request)

    return endpoint


def console_mount(deps: ConsoleDeps) -> Mount:
    """The console's routes, mounted at ``/console``.  What its first pages would
    wait for at 100,000 sources or streams (about a second each: the sources' rows,
    the plan's summary) is worked out meanwhile, in a thread."""
    c = Console(deps)

    def warm() -> None:
        streams_by_source(deps.config())
        deps.sources({"per_page": "1"})

    threading.Thread(target=warm, name="console-warm", daemon=True).start()
    guarded = c.guarded
    routes = [
        Route("/", guarded(c.overview)),
        Route("/login", c.login_page, methods=["GET"]),
        Route("/login", with_fields(c.login), methods=["POST"]),
        Route("/logout", with_fields(guarded(c.logout, change=True)), methods=["POST"]),
        Route("/static/{name}", c.static_file),
        Route("/sources", guarded(c.sources)),
        Route("/sources/{name}", guarded(c.source)),
        Route("/streams", guarded(c.streams)),
        Route("/streams/{name}", guarded(c.stream)),
        Route("/editor", guarded(c.editor)),
        Route("/preview", with_fields(guarded(c.preview, change=True)), methods=["POST"]),
        Route("/apply", with_fields(guarded(c.apply, change=True)), methods=["POST"]),
    ]
    return Mount("/console", routes=routes)
