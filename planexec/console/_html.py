"""The console's pages: plain HTML with inline CSS and SVG, escaped at every value.

No template engine and no front-end build: each page is a function of the data the
store returns. The only script is the live-update loop (`LIVE_SCRIPT`), which reloads
the page's ``<main>`` from the server when the store reports a change.
"""

from __future__ import annotations

import datetime as dt
import html
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "approval_page",
    "error_page",
    "plan_graph_svg",
    "run_page",
    "runs_page",
]

STATUS_COLORS = {
    "SUCCEEDED": "#2e7d32",
    "FAILED": "#c62828",
    "BLOCKED": "#f9a825",
    "SKIPPED": "#0097a7",
    "CANCELLED": "#8e24aa",
    "RUNNING": "#1565c0",
    "INTERRUPTED": "#6d4c41",
    "WAITING_APPROVAL": "#ef6c00",
}

CSS = """
body{font-family:system-ui,sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#263238;color:#fff;padding:10px 20px}
header a{color:#fff;text-decoration:none;font-weight:600}
main{padding:16px 20px;max-width:1200px}
table{border-collapse:collapse;width:100%;background:#fff}
th,td{border-bottom:1px solid #ddd;padding:6px 8px;text-align:left;vertical-align:top}
th{background:#eceff1}
.status{display:inline-block;padding:1px 8px;border-radius:10px;color:#fff;font-size:.85em}
pre{background:#fff;border:1px solid #ddd;padding:8px;overflow:auto;white-space:pre-wrap}
.error{color:#b71c1c}
.problems{background:#ffebee;border:1px solid #e57373;padding:8px}
.notice{background:#e8f5e9;border:1px solid #81c784;padding:8px}
form.inline{display:inline-block;margin-right:12px;vertical-align:top}
textarea{width:420px;height:110px;font-family:monospace}
input[type=text]{width:320px}
.kind{font-family:monospace;font-weight:600}
nav.filters a{margin-right:10px}
section{margin-bottom:22px}
"""

LIVE_SCRIPT = """
<script>
(function(){
  var es = new EventSource(document.body.dataset.stream);
  es.onmessage = function(){
    fetch(window.location.href, {headers: {"X-Console-Fragment": "1"}})
      .then(function(r){ return r.ok ? r.text() : null; })
      .then(function(t){ if (t !== null) {
        document.querySelector("main").innerHTML = t;
        document.body.dataset.updated = String(Date.now());
      }});
  };
})();
</script>
"""


def esc(value: Any) -> str:
    """Escape anything for HTML text or a quoted attribute."""
    return html.escape("" if value is None else str(value), quote=True)


def pretty(value: Any) -> str:
    """JSON, indented, for a ``<pre>``."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def when(ts: float | None) -> str:
    """A time stamp as UTC text."""
    if ts is None:
        return "-"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def seconds(value: float | None) -> str:
    """A duration."""
    return "-" if value is None else f"{value:.2f} s"


def badge(status: str) -> str:
    """A coloured status label."""
    color = STATUS_COLORS.get(status, "#546e7a")
    return f'<span class="status" style="background:{color}">{esc(status)}</span>'


def page(title: str, main: str, *, stream: str | None = None) -> str:
    """A whole page; with ``stream``, its ``<main>`` follows the store live."""
    live = f' data-stream="{esc(stream)}"' if stream else ""
    script = LIVE_SCRIPT if stream else ""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{esc(title)} · planexec console</title><style>{CSS}</style></head>"
        f'<body{live}><header><a href="/">planexec console</a></header>'
        f"<main>{main}</main>{script}</body></html>"
    )


def runs_main(runs: Sequence[Mapping[str, Any]], status: str | None) -> str:
    """The runs list: waiting approvals first, then newest first."""
    filters = ['<a href="/">all</a>'] + [
        f'<a href="/?status={esc(s)}">{esc(s.lower().replace("_", " "))}</a>'
        for s in ("WAITING_APPROVAL", "RUNNING", "FAILED", "SUCCEEDED", "INTERRUPTED")
    ]
    shown = f" ({esc(status)})" if status else ""
    rows = []
    for r in runs:
        kind = f' <span class="kind">[{esc(r["error_kind"])}]</span>' if r.get("error_kind") else ""
        question = r.get("question") or "-"
        rows.append(
            f'<tr data-run="{esc(r["run_id"])}" data-status="{esc(r["status"])}">'
            f'<td><a href="/runs/{esc(r["run_id"])}">{esc(r["run_id"])}</a></td>'
            f"<td>{badge(str(r['status']))}{kind}</td>"
            f"<td>{esc(question)}</td><td>{esc(when(r.get('created_at')))}</td>"
            f"<td>{esc(seconds(r.get('duration')))}</td><td>{esc(r.get('steps') or '-')}</td></tr>"
        )
    body = "".join(rows) or "<tr><td colspan=6>no runs recorded</td></tr>"
    return (
        f"<h1>Runs{shown}</h1><nav class=filters>{''.join(filters)}</nav><p></p>"
        "<table id=runs><tr><th>run</th><th>status</th><th>question</th><th>started</th>"
        f"<th>duration</th><th>steps</th></tr>{body}</table>"
    )


def runs_page(runs: Sequence[Mapping[str, Any]], status: str | None, stream: str) -> str:
    """The whole runs page."""
    return page("runs", runs_main(runs, status), stream=stream)


def plan_graph_svg(steps: Sequence[Mapping[str, Any]]) -> str:
    """The plan's steps as an SVG graph: one column per dependency depth, edges as lines."""
    if not steps:
        return ""
    ids = [int(s["id"]) for s in steps]
    deps = {
        int(s["id"]): [int(d) for d in s.get("depends_on") or [] if int(d) in ids] for s in steps
    }
    depth: dict[int, int] = {}

    def level(sid: int, seen: frozenset[int] = frozenset()) -> int:
        if sid in depth:
            return depth[sid]
        if sid in seen:  # a cycle: the plan's diagnostics report it
            return 0
        d = 1 + max((level(p, seen | {sid}) for p in deps[sid]), default=-1)
        depth[sid] = d
        return d

    for sid in ids:
        level(sid)
    columns: dict[int, list[int]] = {}
    for sid in ids:
        columns.setdefault(depth[sid], []).append(sid)
    box_w, box_h, gap_x, gap_y = 170, 38, 60, 16
    pos = {
        sid: (10 + col * (box_w + gap_x), 10 + row * (box_h + gap_y))
        for col, members in columns.items()
        for row, sid in enumerate(members)
    }
    width = 20 + (max(columns) + 1) * (box_w + gap_x)
    height = 20 + max(len(m) for m in columns.values()) * (box_h + gap_y)
    tools = {int(s["id"]): s.get("tool") or "(reasoning)" for s in steps}
    parts = []
    for sid, parents in deps.items():
        x2, y2 = pos[sid]
        for p in parents:
            x1, y1 = pos[p]
            parts.append(
                f'<line x1="{x1 + box_w}" y1="{y1 + box_h / 2}" x2="{x2}" y2="{y2 + box_h / 2}" '
                'stroke="#90a4ae" stroke-width="1.5" marker-end="url(#arrow)"/>'
            )
    for sid, (x, y) in pos.items():
        parts.append(
            f'<g data-step="{sid}"><rect x="{x}" y="{y}" width="{box_w}" height="{box_h}" rx="6" '
            'fill="#fff" stroke="#546e7a"/>'
            f'<text x="{x + 8}" y="{y + 24}" font-size="13">#{sid} {esc(tools[sid])}</text></g>'
        )
    return (
        f'<svg class="plan-graph" width="{width}" height="{height}" '
        'xmlns="http://www.w3.org/2000/svg"><defs><marker id="arrow" viewBox="0 0 10 10" '
        'refX="10" refY="5" markerWidth="6" markerHeight="6" orient="auto-start-reverse">'
        '<path d="M 0 0 L 10 5 L 0 10 z" fill="#90a4ae"/></marker></defs>'
        f"{''.join(parts)}</svg>"
    )


def _args_cell(step: Mapping[str, Any]) -> str:
    given = step.get("args")
    args: dict[str, Any] = given if isinstance(given, dict) else {}
    resolution = step.get("resolution") or {}
    grounding = step.get("grounding") or {}
    lines = []
    for name in dict.fromkeys([*args, *resolution]):
        value = json.dumps(args.get(name), ensure_ascii=False, default=str)
        how = resolution.get(name, "-")
        g = grounding.get(name)
        where = ""
        if g:
            paths = ", ".join(g.get("paths") or []) or "-"
            missing = f"; found nowhere: {', '.join(g['missing'])}" if g.get("missing") else ""
            where = (
                f" <span class=where>({esc(g.get('status'))} at {esc(paths)}{esc(missing)})</span>"
            )
        lines.append(
            f"<div><code>{esc(name)}</code> = <code>{esc(value[:300])}</code> "
            f"<em>{esc(how)}</em>{where}</div>"
        )
    return "".join(lines) or "-"


def run_main(data: Mapping[str, Any], *, flash: str | None = None) -> str:
    """A run: header, approvals waiting, plans (text and graph), steps, decisions, timeline."""
    run = data["run"]
    rid = esc(run["run_id"])
    out = []
    if flash:
        out.append(f'<p class="notice" id="flash">{esc(flash)}</p>')
    kind = f' <span class="kind">[{esc(run["error_kind"])}]</span>' if run.get("error_kind") else ""
    out.append(f"<h1>Run <code>{rid}</code> {badge(str(run['status']))}{kind}</h1>")
    out.append(
        f"<p>question: {esc(run.get('question') or '-')}<br>"
        f"started {esc(when(run.get('created_at')))}, "
        + (
            f"finished {esc(when(run.get('finished_at')))}"
            if run.get("finished_at")
            else "not finished"
        )
        + "</p>"
    )
    if run.get("error"):
        out.append(f'<p class="error" id="run-error">reason: {esc(run["error"])}</p>')
    if run.get("answer"):
        out.append(f"<p>answer: {esc(run['answer'])}</p>")
    waiting = (data.get("approvals") or {}).get("waiting") or []
    if waiting:
        items = "".join(
            f'<li><a class="decide" href="/runs/{rid}/steps/{int(w["step_id"])}">'
            f"step {int(w['step_id'])}: {esc(w['tool'])}</a> — {esc(w.get('reason'))}</li>"
            for w in waiting
        )
        out.append(f"<section id=waiting><h2>Waiting for approval</h2><ul>{items}</ul></section>")
    if data.get("cancellable"):
        out.append(
            f'<form method=post action="/runs/{rid}/cancel" class=inline>'
            f'<input type=hidden name=csrf value="{esc(data["csrf"])}">'
            '<input type=text name=reason id=cancel-reason placeholder="why (recorded)">'
            "<button id=cancel type=submit>Cancel the run</button></form>"
        )
    if data.get("resumable"):
        out.append(
            f'<form method=post action="/runs/{rid}/resume" class=inline>'
            f'<input type=hidden name=csrf value="{esc(data["csrf"])}">'
            "<button id=resume type=submit>Resume the run</button></form>"
        )
    for p in data.get("plans") or []:
        plan = p.get("plan")
        why = f" — {esc(p['reason'])}" if p.get("reason") else ""
        out.append(f"<section class=plan><h2>Plan v{int(p['version'])}{why}</h2>")
        if plan:
            out.append(plan_graph_svg(plan.get("steps") or []))
            diags = "".join(
                f"<li>{esc(d['severity'])} <span class=kind>{esc(d['code'])}</span>: "
                f"{esc(d['message'])}</li>"
                for d in plan.get("diagnostics") or []
            )
            if diags:
                out.append(f"<ul class=diagnostics>{diags}</ul>")
        else:
            out.append(f"<p class=error>no usable plan: {esc(p.get('error') or '-')}</p>")
        out.append(
            f"<details><summary>plan text</summary><pre>{esc(p.get('text'))}</pre></details>"
        )
        out.append("</section>")
    rows = []
    for s in data.get("steps") or []:
        error = ""
        if s.get("error"):
            error = (
                '<div class="error step-error">'
                f"<span class=kind>{esc(s.get('error_kind'))}</span>: "
                f"{esc(s['error'])}</div>"
            )
        note = f"<div><em>note: {esc(s['note'])}</em></div>" if s.get("note") else ""
        rows.append(
            f'<tr data-step="{int(s["step_id"])}">'
            f"<td>v{int(s['plan_version'])} #{int(s['step_id'])}</td>"
            f"<td>{esc(s.get('tool') or '(reasoning)')}</td><td>{badge(str(s['status']))}</td>"
            f"<td>{esc(seconds(s.get('duration')))}</td><td>{int(s.get('attempts') or 0)}</td>"
            f"<td>{_args_cell(s)}{error}{note}</td></tr>"
        )
    out.append(
        "<section><h2>Steps</h2><table id=steps><tr><th>step</th><th>tool</th><th>status</th>"
        "<th>time</th><th>attempts</th><th>arguments (how resolved, where found) and errors</th>"
        f"</tr>{''.join(rows) or '<tr><td colspan=6>no step finished</td></tr>'}</table></section>"
    )
    calls = data.get("calls_without_result") or []
    if calls:
        items = "".join(
            f"<li>v{int(c['plan_version'])} #{int(c['step_id'])} {esc(c['tool'])} "
            f"(attempt {int(c['attempt'])}) at {esc(when(c['ts']))}</li>"
            for c in calls
        )
        out.append(f"<section><h2>Calls started without a result</h2><ul>{items}</ul></section>")
    decisions = (data.get("approvals") or {}).get("decisions") or []
    if decisions:
        items = "".join(
            f"<li>v{int(d.get('plan_version') or 1)} #{esc(d.get('step_id'))} "
            f"<strong>{esc(d.get('action'))}</strong> by {esc(d.get('by') or '?')} at "
            f"{esc(when(d.get('decided_at')))}"
            + (
                f", edited <code>{esc(json.dumps(d['edited'], ensure_ascii=False))}</code>"
                if d.get("edited")
                else ""
            )
            + (f": {esc(d['reason'])}" if d.get("reason") else "")
            + "</li>"
            for d in decisions
        )
        out.append(f"<section id=decisions><h2>Decisions</h2><ul>{items}</ul></section>")
    out.append(
        f'<section><h2>Timeline</h2><iframe id=timeline src="/runs/{rid}/timeline" '
        'style="width:100%;height:420px;border:1px solid #ddd;background:#fff"></iframe></section>'
    )
    return "".join(out)


def run_page(data: Mapping[str, Any], stream: str, *, flash: str | None = None) -> str:
    """The whole run page."""
    return page(f"run {data['run']['run_id']}", run_main(data, flash=flash), stream=stream)


def approval_page(
    request: Mapping[str, Any],
    *,
    csrf: str,
    problems: Iterable[str] = (),
    edited_text: str = "",
    reason_text: str = "",
) -> str:
    """A waiting step: the request, and the approve / edit / reject forms.

    Each form carries the request's ``request_key`` (`planexec.runs.request_key`), so a
    decision lands only on the request shown here.
    """
    rid, sid = esc(request["run_id"]), int(request["step_id"])
    shown = list(problems)
    errors = (
        '<div class="problems" id="problems"><strong>Not recorded:</strong><ul>'
        + "".join(f"<li>{esc(p)}</li>" for p in shown)
        + "</ul></div>"
        if shown
        else ""
    )
    resolution = "".join(
        f"<li><code>{esc(k)}</code>: {esc(v)}</li>"
        for k, v in (request.get("resolution") or {}).items()
    )
    hidden = (
        f'<input type=hidden name=csrf value="{esc(csrf)}">'
        f'<input type=hidden name=seen value="{esc(request["request_key"])}">'
    )
    base = f"/runs/{rid}/steps/{sid}"
    main = (
        f'<p><a href="/runs/{rid}">← run {rid}</a></p>'
        f"<h1>Step {sid} waits for approval: <code>{esc(request['tool'])}</code></h1>"
        f"<p>why: {esc(request.get('reason') or '-')} "
        f"(plan v{int(request.get('plan_version') or 1)})</p>"
        f"{errors}"
        "<h2>Arguments the tool would receive</h2>"
        f"<pre id=args>{esc(pretty(request.get('args')))}</pre>"
        f"<h3>How each was resolved</h3><ul>{resolution or '<li>-</li>'}</ul>"
        f"<details open><summary>The tool's argument schema</summary>"
        f"<pre id=schema>{esc(pretty(request.get('args_schema') or {}))}</pre></details>"
        "<h2>Decide</h2>"
        f'<form method=post action="{base}/approve" class=inline>{hidden}'
        "<button id=approve type=submit>Approve as is</button></form>"
        f'<form method=post action="{base}/edit" class=inline>{hidden}'
        "<label>Edited arguments (a JSON object; they replace the resolved ones of the same "
        f"names)<br><textarea name=args id=edit-args>{esc(edited_text)}</textarea></label><br>"
        "<button id=edit type=submit>Approve with these edits</button></form>"
        f'<form method=post action="{base}/reject" class=inline>{hidden}'
        f"<label>Reason (the planner is told it)<br><input type=text name=reason id=reason "
        f'value="{esc(reason_text)}"></label><br>'
        "<button id=reject type=submit>Reject</button></form>"
    )
    return page(f"approve step {sid}", main)


def error_page(status: int, message: str) -> str:
    """A page that says what went wrong, in one line."""
    return page(
        f"error {status}", f'<h1>{status}</h1><p class="error" id="message">{esc(message)}</p>'
    )
