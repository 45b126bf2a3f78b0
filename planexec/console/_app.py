"""The console's web app: routes over a run store, and the checks every request passes.

Reads go through the store's own reading methods (the same ones ``planexec runs show``
uses); decisions and resumes go through the exact code of ``planexec runs approve``,
``reject`` and ``resume`` (`planexec.commands.runs`), so the checks (the schema of an
edit, the state of the run, what the store claims) are the ones the CLI applies.

Every request passes `_Guard` first: the ``Host`` header must name this server (DNS
rebinding), a token (when set) must come as ``Authorization: Bearer`` or as the cookie
``/login?token=...`` sets, and a ``POST`` must carry the page's CSRF token (double
submit: a ``SameSite=Strict`` cookie and the form field must match) and, if the browser
sends one, an allowed ``Origin``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, quote

import anyio
from loguru import logger
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

import planexec.console._html as _html
from planexec.errors import ApprovalError, ConfigError, PlanexecError, RunNotFoundError
from planexec.mcp.principals import PRINCIPAL_KEY, Principals
from planexec.results import RunStatus
from planexec.store import RunStore

__all__ = ["ConsoleSettings", "create_app"]

CSRF_COOKIE = "planexec_csrf"
TOKEN_COOKIE = "planexec_console_token"
POLL_SECONDS = 0.5
"""How often a live page's stream reads the store for changes."""
STREAM_SECONDS = 1800.0
"""How long one live stream lasts (the page opens a new one when it ends)."""

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[Any]]
Send = Callable[[Any], Awaitable[None]]


@dataclass
class ConsoleSettings:
    """What the console serves and whom it lets in."""

    store: RunStore
    """The run store it reads and records decisions in."""
    allowed_hosts: Collection[str] = ()
    """``Host`` header values accepted (``127.0.0.1:8780`` ...)."""
    allowed_origins: Collection[str] = ()
    """``Origin`` header values accepted on a ``POST`` (``http://127.0.0.1:8780`` ...)."""
    token: str | None = None
    """When set, every request needs it (bearer header, or the login cookie)."""
    principals: Principals | None = None
    """With ``--tokens FILE``: each token names a principal, who sees only the runs the
    store records as theirs (`RunStore.owner`); an admin sees every run."""
    resumes: dict[str, asyncio.Task[Any]] = field(default_factory=dict)
    """Runs being resumed by this console, by id."""


class _Guard:
    """The checks in front of every route (see the module docstring)."""

    def __init__(
        self, app: Callable[[Scope, Receive, Send], Awaitable[None]], settings: ConsoleSettings
    ) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        host = request.headers.get("host", "")
        if self.settings.allowed_hosts and host not in self.settings.allowed_hosts:
            await _refuse(scope, receive, send, 421, f"host {host!r} is not served here")
            return
        tokens = _tokens(self.settings)
        if tokens:
            if request.url.path == "/login":
                await _login(scope, receive, send, tokens)
                return
            who = _principal(request, tokens)
            if who is None:
                await _refuse(
                    scope,
                    receive,
                    send,
                    401,
                    "a token is required: open /login?token=TOKEN once, or send "
                    "'Authorization: Bearer TOKEN'",
                )
                return
            scope[PRINCIPAL_KEY] = who
        if request.method == "POST":
            origin = request.headers.get("origin")
            if origin is not None and origin not in self.settings.allowed_origins:
                await _refuse(scope, receive, send, 403, f"origin {origin!r} is not allowed")
                return
        await self.app(scope, receive, send)


ANYONE = ""
"""The principal of the single ``--token`` (no principals): it sees every run."""


def _tokens(settings: ConsoleSettings) -> dict[str, str]:
    """Principal by token (``ANYONE`` for the single ``--token``)."""
    if settings.principals is not None:
        return {token: name for name, token in settings.principals.tokens.items()}
    return {settings.token: ANYONE} if settings.token else {}


def _match(given: str, tokens: dict[str, str]) -> str | None:
    """The principal whose token ``given`` is (each compared in constant time)."""
    found = None
    for token, name in tokens.items():
        if given and hmac.compare_digest(given.encode(), token.encode()):
            found = name
    return found


def _principal(request: Request, tokens: dict[str, str]) -> str | None:
    given = request.headers.get("authorization", "")
    scheme, _, credentials = given.strip().partition(" ")
    if scheme.lower() == "bearer":
        who = _match(credentials.strip(), tokens)
        if who is not None:
            return who
    return _match(request.cookies.get(TOKEN_COOKIE, ""), tokens)


async def _login(scope: Scope, receive: Receive, send: Send, tokens: dict[str, str]) -> None:
    given = Request(scope).query_params.get("token", "")
    if _match(given, tokens) is None:
        await _refuse(scope, receive, send, 401, "wrong token")
        return
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(TOKEN_COOKIE, given, httponly=True, samesite="strict")
    await response(scope, receive, send)


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, message: str) -> None:
    await HTMLResponse(_html.error_page(status, message), status_code=status)(scope, receive, send)


# ---------------------------------------------------------------------- reading


def _runs(store: RunStore, status: str | None) -> list[dict[str, Any]]:
    """The runs, waiting approvals first, then newest first."""
    records = store.list_runs(status, limit=500)
    out = []
    for r in records:
        end = r.finished_at or r.updated_at
        done = sum(r.step_counts.get(k, 0) for k in ("SUCCEEDED",))
        steps = f"{done}/{r.plan_steps} ok" if r.plan_steps is not None else ""
        out.append(
            {
                **r.to_dict(),
                "duration": (end - r.created_at) if end and r.created_at else None,
                "steps": steps,
            }
        )
    out.sort(
        key=lambda d: (d["status"] != str(RunStatus.WAITING_APPROVAL), -(d["created_at"] or 0.0))
    )
    return out


def _run(store: RunStore, run_id: str) -> dict[str, Any]:
    from planexec.commands.runs import show_data

    return show_data(store, run_id)


def _fingerprint(store: RunStore, run_id: str | None) -> str:
    """What changes when a page should be redrawn (the run's, or every run's, last event)."""
    if run_id is not None:
        r = store.get_run(run_id)
        return f"{r.status}:{r.updated_at}:{r.plan_version}"
    return json.dumps(
        [(r.run_id, str(r.status), r.updated_at) for r in store.list_runs(None, limit=500)]
    )


# ---------------------------------------------------------------------- routes


def _csrf(request: Request) -> tuple[str, bool]:
    """The request's CSRF token, and whether it is new (to be set as a cookie)."""
    have = request.cookies.get(CSRF_COOKIE)
    return (have, False) if have else (secrets.token_urlsafe(32), True)


def _html_response(
    request: Request, body: str, csrf: tuple[str, bool], status: int = 200
) -> Response:
    response = HTMLResponse(body, status_code=status)
    if csrf[1]:
        response.set_cookie(CSRF_COOKIE, csrf[0], httponly=True, samesite="strict")
    return response


def _fragment(request: Request) -> bool:
    return request.headers.get("x-console-fragment") == "1"


async def _form(request: Request) -> dict[str, str]:
    """The posted form (urlencoded), after the CSRF check.

    Raises:
        _Refused: the form's CSRF token does not match the cookie.
    """
    raw = (await request.body()).decode("utf-8", errors="replace")
    form = {k: v[-1] for k, v in parse_qs(raw, keep_blank_values=True).items()}
    cookie = request.cookies.get(CSRF_COOKIE, "")
    if not cookie or not hmac.compare_digest(form.get("csrf", ""), cookie):
        raise _Refused(403, "the form's CSRF token is missing or stale: reload the page")
    return form


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def create_app(settings: ConsoleSettings) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """The console as an ASGI app (routes behind the request checks)."""
    store = settings.store

    async def read(fn: Callable[..., Any], *args: Any) -> Any:
        return await anyio.to_thread.run_sync(lambda: fn(*args))

    def sees(who: str | None, run_id: str) -> bool:
        """Whether the request's principal may see ``run_id`` (its owner, or an admin)."""
        principals = settings.principals
        if principals is None or who is None or who in principals.admins:
            return True
        return store.owner(run_id) == who

    def scoped(
        handler: Callable[[Request], Awaitable[Response]],
    ) -> Callable[[Request], Awaitable[Response]]:
        """A route of one run: another principal's run is "not found", as an unknown id."""

        async def wrapped(request: Request) -> Response:
            run_id = request.path_params.get("run_id") or request.query_params.get("run")
            who = request.scope.get(PRINCIPAL_KEY)
            if run_id is not None and not await read(sees, who, run_id):
                return HTMLResponse(_html.error_page(404, f"no run {run_id!r}"), 404)
            return await handler(request)

        return wrapped

    def own_runs(request: Request, status: str | None) -> list[dict[str, Any]]:
        who = request.scope.get(PRINCIPAL_KEY)
        return [r for r in _runs(store, status) if sees(who, r["run_id"])]

    async def runs_page(request: Request) -> Response:
        status = request.query_params.get("status") or None
        if status is not None and status not in {s.value for s in RunStatus}:
            return HTMLResponse(_html.error_page(400, f"unknown status {status!r}"), 400)
        since = await read(_fingerprint, store, None)
        runs = await read(own_runs, request, status)
        csrf = _csrf(request)
        if _fragment(request):
            return HTMLResponse(_html.runs_main(runs, status))
        stream = f"/api/stream?since={quote(since)}"
        return _html_response(request, _html.runs_page(runs, status, stream), csrf)

    async def runs_json(request: Request) -> Response:
        status = request.query_params.get("status") or None
        return JSONResponse(await read(own_runs, request, status))

    async def run_data(request: Request, run_id: str, csrf: str) -> dict[str, Any]:
        data: dict[str, Any] = await read(_run, store, run_id)
        waiting = data["approvals"]["waiting"]
        status = data["run"]["status"]
        data["csrf"] = csrf
        data["resumable"] = (
            not waiting
            and status in (RunStatus.WAITING_APPROVAL.value, RunStatus.INTERRUPTED.value)
            and run_id not in settings.resumes
        )
        data["cancellable"] = status in (
            RunStatus.RUNNING.value,
            RunStatus.WAITING_APPROVAL.value,
            RunStatus.INTERRUPTED.value,
        )
        return data

    async def run_page(request: Request) -> Response:
        run_id = request.path_params["run_id"]
        csrf = _csrf(request)
        try:
            since = await read(_fingerprint, store, run_id)
            data = await run_data(request, run_id, csrf[0])
        except RunNotFoundError:
            return HTMLResponse(_html.error_page(404, f"no run {run_id!r}"), 404)
        flash = request.query_params.get("flash")
        if _fragment(request):
            return HTMLResponse(_html.run_main(data, flash=flash))
        stream = f"/api/stream?run={quote(run_id)}&since={quote(since)}"
        return _html_response(request, _html.run_page(data, stream, flash=flash), csrf)

    async def run_json(request: Request) -> Response:
        try:
            data = await read(_run, store, request.path_params["run_id"])
        except RunNotFoundError:
            return JSONResponse({"error": "no such run"}, 404)
        return JSONResponse(json.loads(json.dumps(data, default=str)))

    async def timeline(request: Request) -> Response:
        from planexec.commands.runs import render_timeline_html, timeline_bars

        try:
            record, bars = await read(timeline_bars, store, request.path_params["run_id"])
        except RunNotFoundError:
            return HTMLResponse(_html.error_page(404, "no such run"), 404)
        return HTMLResponse(render_timeline_html(record, bars))

    async def approval_page(request: Request) -> Response:
        from planexec.runs import waiting_request

        run_id, step = request.path_params["run_id"], request.path_params["step"]
        csrf = _csrf(request)
        try:
            waiting = await read(waiting_request, store, run_id, step)
        except RunNotFoundError:
            return HTMLResponse(_html.error_page(404, f"no run {run_id!r}"), 404)
        except ApprovalError as exc:
            return HTMLResponse(_html.error_page(409, str(exc)), 409)
        request_data = await shown(waiting)
        return _html_response(request, _html.approval_page(request_data, csrf=csrf[0]), csrf)

    async def shown(waiting: Any) -> dict[str, Any]:
        """What the approval page shows of a request: with its schema and its key."""
        from planexec.runs import request_key

        return {
            **waiting.to_dict(),
            "args_schema": await schema_of(waiting),
            "request_key": request_key(waiting),
        }

    async def schema_of(waiting: Any) -> Any:
        """The waiting tool's schema, from the tools the run recorded (or why it is not shown)."""
        from planexec.commands.runs import recorded_schema

        try:
            return await recorded_schema(store, waiting.run_id, waiting.tool, waiting.server)
        except PlanexecError as exc:
            return {"unavailable": str(exc)}

    async def decide(request: Request) -> Response:
        from planexec.approval import ApprovalDecision
        from planexec.commands.runs import decide_recorded
        from planexec.runs import waiting_request

        run_id, step, action = (request.path_params[k] for k in ("run_id", "step", "action"))
        try:
            form = await _form(request)
        except _Refused as exc:
            return HTMLResponse(_html.error_page(exc.status, exc.message), exc.status)
        by = "console"
        problems: list[str] = []
        decision: Any = None
        if action == "approve":
            decision = ApprovalDecision.approve(by=by)
        elif action == "reject":
            reason = form.get("reason", "").strip()
            if not reason:
                problems.append("say why the step is rejected (the planner is told)")
            else:
                decision = ApprovalDecision.reject(reason, by=by)
        else:
            try:
                edits = json.loads(form.get("args", ""))
            except json.JSONDecodeError as exc:
                problems.append(f"the edited arguments are not JSON: {exc}")
            else:
                if isinstance(edits, dict) and edits:
                    decision = ApprovalDecision.edit(edits, by=by)
                else:
                    problems.append("the edited arguments must be a JSON object of names to values")
        seen = form.get("seen", "")
        if not seen:  # what the person saw is unknown: deciding would guess it
            problems.append(
                "the form did not say which request it decides (the approval page's forms "
                "send its key): look at the request below and decide again"
            )
            decision = None
        if decision is not None:
            try:
                await decide_recorded(store, run_id, step, decision, seen=seen)
            except ApprovalError as exc:
                problems += list(exc.problems) or [str(exc)]
            except RunNotFoundError:
                return HTMLResponse(_html.error_page(404, f"no run {run_id!r}"), 404)
            except (ConfigError, PlanexecError) as exc:
                problems.append(str(exc))
            else:
                flash = f"step {step}: {decision.action} recorded"
                return RedirectResponse(f"/runs/{run_id}?flash={flash}", status_code=303)
        try:
            waiting = await read(waiting_request, store, run_id, step)
        except (ApprovalError, RunNotFoundError) as exc:
            return HTMLResponse(_html.error_page(409, str(exc)), 409)
        csrf = _csrf(request)
        body = _html.approval_page(
            await shown(waiting),
            csrf=csrf[0],
            problems=problems,
            edited_text=form.get("args", ""),
            reason_text=form.get("reason", ""),
        )
        return _html_response(request, body, csrf, status=422)

    async def resume(request: Request) -> Response:
        from planexec.commands.runs import resume_recorded

        run_id = request.path_params["run_id"]
        try:
            await _form(request)
        except _Refused as exc:
            return HTMLResponse(_html.error_page(exc.status, exc.message), exc.status)
        if run_id in settings.resumes:
            return RedirectResponse(f"/runs/{run_id}?flash=already resuming", status_code=303)

        async def go() -> None:
            try:
                await resume_recorded(store, run_id)
            except PlanexecError as exc:
                logger.warning("console: resuming run {} failed: {}", run_id, exc)
            finally:
                settings.resumes.pop(run_id, None)

        settings.resumes[run_id] = asyncio.create_task(go())
        return RedirectResponse(f"/runs/{run_id}?flash=resuming", status_code=303)

    async def cancel(request: Request) -> Response:
        from planexec.cancelling import cancel_run

        run_id = request.path_params["run_id"]
        try:
            form = await _form(request)
        except _Refused as exc:
            return HTMLResponse(_html.error_page(exc.status, exc.message), exc.status)
        reason = form.get("reason", "").strip() or "cancelled from the console"
        try:
            outcome = await cancel_run(store, run_id, reason=reason, by="console")
        except RunNotFoundError:
            return HTMLResponse(_html.error_page(404, f"no run {run_id!r}"), 404)
        except PlanexecError as exc:
            return RedirectResponse(f"/runs/{run_id}?flash={quote(str(exc))}", status_code=303)
        said = "cancelled" if outcome.stopped else "cancel requested: its process stops it"
        return RedirectResponse(f"/runs/{run_id}?flash={quote(said)}", status_code=303)

    async def stream(request: Request) -> Response:
        run_id = request.query_params.get("run") or None
        since = request.query_params.get("since")  # the state the page was drawn from

        async def changes() -> AsyncIterator[str]:
            loop = asyncio.get_running_loop()
            end = loop.time() + STREAM_SECONDS
            last = await read(_fingerprint, store, run_id)
            yield ": live\n\n"
            if since is not None and since != last:  # changed before the page listened
                yield "data: changed\n\n"
            while loop.time() < end and not await request.is_disconnected():
                await asyncio.sleep(POLL_SECONDS)
                now = await read(_fingerprint, store, run_id)
                if now != last:
                    last = now
                    yield "data: changed\n\n"

        return StreamingResponse(
            changes(), media_type="text/event-stream", headers={"cache-control": "no-store"}
        )

    routes = [
        Route("/", runs_page),
        Route("/api/runs", runs_json),
        Route("/api/stream", scoped(stream)),
        Route("/api/runs/{run_id}", scoped(run_json)),
        Route("/runs/{run_id}", scoped(run_page)),
        Route("/runs/{run_id}/timeline", scoped(timeline)),
        Route("/runs/{run_id}/steps/{step:int}", scoped(approval_page)),
        Route("/runs/{run_id}/steps/{step:int}/{action:str}", scoped(decide), methods=["POST"]),
        Route("/runs/{run_id}/resume", scoped(resume), methods=["POST"]),
        Route("/runs/{run_id}/cancel", scoped(cancel), methods=["POST"]),
    ]
    app = Starlette(routes=routes)
    return _Guard(app, settings)
