"""The console's routes, through its ASGI app: what each page shows and what each form records."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the console needs planexec[mcp] (starlette)")

from console_fixtures import Recorded, cli  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from planexec.console import ConsoleSettings, create_app  # noqa: E402
from planexec.console._app import _fingerprint  # noqa: E402
from planexec.runs import request_key, waiting_request  # noqa: E402
from planexec.store import SQLiteRunStore  # noqa: E402

HOST = "testserver"


@pytest.fixture
def store(recorded: Recorded) -> Iterator[SQLiteRunStore]:
    s = SQLiteRunStore(recorded.store)
    yield s
    s.close()


def client_for(store: SQLiteRunStore, **settings: object) -> TestClient:
    options: dict[str, object] = {"allowed_hosts": {HOST}, "allowed_origins": {f"http://{HOST}"}}
    options.update(settings)
    return TestClient(create_app(ConsoleSettings(store=store, **options)))  # type: ignore[arg-type]


def csrf_of(page: str) -> str:
    found = re.search(r'name=csrf value="([^"]+)"', page)
    assert found, "the page has no form with a CSRF token"
    return found.group(1)


def seen_of(page: str) -> str:
    """The request key an approval page's forms send (what the person looked at)."""
    keys = set(re.findall(r'name=seen value="([^"]+)"', page))
    assert len(keys) == 1 and len(re.findall(r"name=seen ", page)) == 3, (
        "each of the page's three forms carries the key of the request shown"
    )
    return keys.pop()


def form_of(page: str, **fields: str) -> dict[str, str]:
    """What an approval page's form posts: its CSRF token, its request key, ``fields``."""
    return {"csrf": csrf_of(page), "seen": seen_of(page), **fields}


def ask_again(store: SQLiteRunStore, run_id: str, step: int, args: dict[str, object]) -> None:
    """The step asks again with other arguments (a replan, another process resuming)."""
    from planexec.store.base import ApprovalRecord
    from planexec.store.codec import args_digest

    [first] = [r for r in store.approval_requests(run_id) if r.step_id == step]
    store.open_request(ApprovalRecord(
        run_id=run_id, plan_version=first.plan_version, step_id=step, tool=first.tool,
        server=first.server, args=dict(args), digest=args_digest(dict(args)),
        reason=first.reason, opened_at=first.opened_at + 1,
    ))


def decided(store: SQLiteRunStore, run_id: str) -> list[dict[str, object]]:
    return [e for e in store.events(run_id) if e["type"] == "ApprovalDecided"]


def test_the_runs_page_lists_waiting_runs_first_and_filters_by_status(
    store: SQLiteRunStore, recorded: Recorded
) -> None:
    client = client_for(store)
    page = client.get("/").text
    order = re.findall(r'<tr data-run="([^"]+)" data-status="([^"]+)"', page)
    assert {rid for rid, _ in order} == {recorded.failed, recorded.pay, recorded.close}
    statuses = [s for _, s in order]
    assert statuses == sorted(statuses, key=lambda s: s != "WAITING_APPROVAL")
    failed_only = client.get("/?status=FAILED").text
    assert re.findall(r'<tr data-run="([^"]+)"', failed_only) == [recorded.failed]
    assert client.get("/?status=NOPE").status_code == 400


def test_a_failed_run_shows_its_error_kind_and_the_failing_step(
    store: SQLiteRunStore, recorded: Recorded
) -> None:
    page = client_for(store).get(f"/runs/{recorded.failed}").text
    assert "[TOOL_ERROR]" in page
    step = re.search(r'<tr data-step="1">(.*?)</tr>', page, re.S)
    assert step and "TOOL_ERROR" in step.group(1) and "ledger of MAIN is offline" in step.group(1)
    assert '<svg class="plan-graph"' in page and "#1 ledger" in page


def test_an_unknown_run_is_not_found(store: SQLiteRunStore) -> None:
    assert client_for(store).get("/runs/no-such-run").status_code == 404


def test_the_approval_page_shows_the_tool_resolved_arguments_reason_and_schema(
    store: SQLiteRunStore, recorded: Recorded
) -> None:
    client = client_for(store)
    run_page = client.get(f"/runs/{recorded.pay}").text
    assert f'href="/runs/{recorded.pay}/steps/2"' in run_page
    page = client.get(f"/runs/{recorded.pay}/steps/2").text
    assert "<code>pay</code>" in page
    args = re.search(r"<pre id=args>(.*?)</pre>", page, re.S)
    assert args and json.loads(args.group(1).replace("&quot;", '"')) == {
        "account": "ACC-7",
        "amount": 100,
    }
    assert "<code>account</code>: path" in page
    assert "&quot;maximum&quot;: 1000" in page
    assert client.get(f"/runs/{recorded.pay}/steps/1").status_code == 409  # not waiting


def test_an_edit_that_breaks_the_schema_is_refused_with_the_errors_and_records_nothing(
    store: SQLiteRunStore, recorded: Recorded
) -> None:
    client = client_for(store)
    page = client.get(f"/runs/{recorded.pay}/steps/2").text
    refused = client.post(
        f"/runs/{recorded.pay}/steps/2/edit",
        data=form_of(page, args='{"amount": 5000}'),
        follow_redirects=False,
    )
    assert refused.status_code == 422
    assert 'id="problems"' in refused.text and "amount" in refused.text
    assert "{&quot;amount&quot;: 5000}" in refused.text  # the edit is kept in the form
    assert not [e for e in store.events(recorded.pay) if e["type"] == "ApprovalDecided"]


def test_an_accepted_edit_is_recorded_as_the_cli_records_it(
    store: SQLiteRunStore, recorded: Recorded
) -> None:
    client = client_for(store)
    page = client.get(f"/runs/{recorded.pay}/steps/2").text
    done = client.post(
        f"/runs/{recorded.pay}/steps/2/edit",
        data=form_of(page, args='{"amount": 250}'),
        follow_redirects=False,
    )
    assert done.status_code == 303
    shown = cli(
        "runs",
        "show",
        recorded.pay,
        "--store",
        str(recorded.store),
        "--json",
        cwd=recorded.store.parent,
    )
    decisions = json.loads(shown.stdout)["approvals"]["decisions"]
    assert [(d["step_id"], d["action"], d["by"], d["args"]["amount"]) for d in decisions] == [
        (2, "edit", "console", 250)
    ]


def test_a_reject_needs_a_reason_and_then_is_recorded(
    store: SQLiteRunStore, recorded: Recorded
) -> None:
    client = client_for(store)
    page = client.get(f"/runs/{recorded.close}/steps/1").text
    empty = client.post(
        f"/runs/{recorded.close}/steps/1/reject",
        data=form_of(page, reason="  "),
        follow_redirects=False,
    )
    assert empty.status_code == 422
    done = client.post(
        f"/runs/{recorded.close}/steps/1/reject",
        data=form_of(page, reason="wrong account"),
        follow_redirects=False,
    )
    assert done.status_code == 303
    [decided] = [e for e in store.events(recorded.close) if e["type"] == "ApprovalDecided"]
    assert (decided["action"], decided["reason"]) == ("reject", "wrong account")


def test_the_live_fingerprint_changes_when_a_decision_is_recorded(
    store: SQLiteRunStore, recorded: Recorded
) -> None:
    before_run, before_all = _fingerprint(store, recorded.close), _fingerprint(store, None)
    client = client_for(store)
    page = client.get(f"/runs/{recorded.close}/steps/1").text
    client.post(f"/runs/{recorded.close}/steps/1/approve", data=form_of(page))
    assert _fingerprint(store, recorded.close) != before_run
    assert _fingerprint(store, None) != before_all


def test_a_decision_about_a_request_the_step_replaced_records_nothing_and_shows_the_new_one(
    store: SQLiteRunStore, recorded: Recorded
) -> None:
    """The person reads the request to close ACC-9; meanwhile the step asks to close
    ACC-1. "Approve as is" must not approve ACC-1, which nobody saw."""
    client = client_for(store)
    page = client.get(f"/runs/{recorded.close}/steps/1").text  # shows ACC-9
    ask_again(store, recorded.close, 1, {"account": "ACC-1"})
    for action, fields in (("approve", {}), ("edit", {"args": '{"account": "ACC-2"}'}),
                           ("reject", {"reason": "no"})):
        stale = client.post(f"/runs/{recorded.close}/steps/1/{action}",
                            data=form_of(page, **fields), follow_redirects=False)
        assert stale.status_code == 422 and 'id="problems"' in stale.text
        assert "ACC-1" in stale.text and seen_of(stale.text) != seen_of(page)  # the new one
        assert not decided(store, recorded.close)
    assert [r.args for r in store.approval_requests(recorded.close)][-1] == {"account": "ACC-1"}
    done = client.post(f"/runs/{recorded.close}/steps/1/approve", data=form_of(stale.text),
                       follow_redirects=False)
    assert done.status_code == 303
    [decision] = decided(store, recorded.close)
    assert (decision["action"], decision["args"]) == ("approve", {"account": "ACC-1"})


def test_a_decision_without_the_pages_request_key_records_nothing(
    store: SQLiteRunStore, recorded: Recorded
) -> None:
    client = client_for(store)
    page = client.get(f"/runs/{recorded.close}/steps/1").text
    for seen in ({}, {"seen": ""}):
        blind = client.post(f"/runs/{recorded.close}/steps/1/approve",
                            data={"csrf": csrf_of(page), **seen}, follow_redirects=False)
        assert blind.status_code == 422 and 'id="problems"' in blind.text
        assert seen_of(blind.text) == seen_of(page)  # the page again, to decide from
    assert not decided(store, recorded.close)


# ---------------------------------------------------------------------- security


def test_a_foreign_host_header_is_refused(store: SQLiteRunStore) -> None:
    client = client_for(store)
    assert client.get("/", headers={"host": "evil.example"}).status_code == 421


def test_a_form_without_the_pages_csrf_token_records_nothing(
    store: SQLiteRunStore, recorded: Recorded
) -> None:
    client = client_for(store)
    client.get(f"/runs/{recorded.close}/steps/1")  # sets the cookie
    forged = client.post(
        f"/runs/{recorded.close}/steps/1/approve", data={"csrf": "guess"}, follow_redirects=False
    )
    assert forged.status_code == 403
    fresh = client_for(store)  # no cookie at all
    assert (
        fresh.post(
            f"/runs/{recorded.close}/steps/1/approve", data={"csrf": ""}, follow_redirects=False
        ).status_code
        == 403
    )
    assert not [e for e in store.events(recorded.close) if e["type"] == "ApprovalDecided"]


def test_a_post_from_another_origin_is_refused(store: SQLiteRunStore, recorded: Recorded) -> None:
    client = client_for(store)
    page = client.get(f"/runs/{recorded.close}/steps/1").text
    cross = client.post(
        f"/runs/{recorded.close}/steps/1/approve",
        data=form_of(page),
        headers={"origin": "http://evil.example"},
        follow_redirects=False,
    )
    assert cross.status_code == 403
    assert not [e for e in store.events(recorded.close) if e["type"] == "ApprovalDecided"]


def test_with_a_token_every_page_needs_it_and_a_login_sets_a_cookie(store: SQLiteRunStore) -> None:
    client = client_for(store, token="s3cret")
    assert client.get("/").status_code == 401
    assert client.get("/", headers={"authorization": "Bearer s3cret"}).status_code == 200
    assert client.get("/login?token=wrong").status_code == 401
    assert client.get("/login?token=s3cret", follow_redirects=False).status_code == 303
    assert client.get("/").status_code == 200  # the cookie now


def test_off_loopback_without_a_token_the_console_does_not_start(tmp_path: Path) -> None:
    done = cli(
        "console",
        "--store",
        str(tmp_path / "r.sqlite3"),
        "--host",
        "0.0.0.0",
        "--port",
        "0",
        cwd=tmp_path,
    )
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and "--token" in lines[0]


def test_the_cancel_form_cancels_a_waiting_run_through_the_store(
    store: SQLiteRunStore, recorded: Recorded
) -> None:
    client = client_for(store)
    page = client.get(f"/runs/{recorded.pay}").text
    assert 'id=cancel type=submit' in page
    done = client.post(f"/runs/{recorded.pay}/cancel",
                       data={"csrf": csrf_of(page), "reason": "duplicate payment"},
                       follow_redirects=False)
    assert done.status_code == 303
    record = store.get_run(recorded.pay)
    assert record.status.value == "CANCELLED" and "duplicate payment" in (record.error or "")
    cancelled = store.cancel_request(recorded.pay)
    assert cancelled is not None and cancelled.by == "console"
    assert 'id=cancel type=submit' not in client.get(f"/runs/{recorded.pay}").text


def test_with_principals_each_sees_only_their_runs_and_an_admin_sees_every_run(
    store: SQLiteRunStore, recorded: Recorded
) -> None:
    from planexec.mcp.principals import Principals

    store.set_owner(recorded.pay, "alice")
    store.set_owner(recorded.close, "bob")
    principals = Principals(
        {"alice": "alice-token-1", "bob": "bob-token-22", "ops": "ops-token-333"},
        frozenset({"ops"}),
    )
    client = client_for(store, principals=principals)

    def listed(token: str) -> set[str]:
        page = client.get("/", headers={"authorization": f"Bearer {token}"}).text
        return set(re.findall(r'<tr data-run="([^"]+)"', page))

    assert listed("alice-token-1") == {recorded.pay}
    assert listed("bob-token-22") == {recorded.close}
    assert listed("ops-token-333") == {recorded.pay, recorded.close, recorded.failed}
    alice = {"authorization": "Bearer alice-token-1"}
    assert client.get(f"/runs/{recorded.close}", headers=alice).status_code == 404
    assert client.get(f"/runs/{recorded.close}/timeline", headers=alice).status_code == 404
    assert client.get(f"/api/runs/{recorded.close}", headers=alice).status_code == 404
    page = client.get(f"/runs/{recorded.pay}/steps/2", headers=alice).text
    key = request_key(waiting_request(store, recorded.close, 1))  # the right key: not enough
    refused = client.post(f"/runs/{recorded.close}/steps/1/approve", headers=alice,
                          data={"csrf": csrf_of(page), "seen": key}, follow_redirects=False)
    assert refused.status_code == 404
    assert not [e for e in store.events(recorded.close) if e["type"] == "ApprovalDecided"]
    assert client.get("/", headers={"authorization": "Bearer nobody-token"}).status_code == 401
