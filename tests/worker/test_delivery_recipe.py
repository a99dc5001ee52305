"""The poll-then-deliver recipe of docs/workflows.md, run as written there (the code block is read
from the page), with a fake provider, customer endpoint and stamp table in the test database, and a
crash injected between the push and the stamp."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pgq

from .conftest import DB, run_worker_until

PAGE = Path(__file__).resolve().parents[2] / "docs" / "workflows.md"


def recipe_code() -> str:
    """The Python block of the page that starts with `# recipe: deliver-export`."""
    blocks = re.findall(r"```python\n(# recipe: deliver-export\n.*?)```", PAGE.read_text(), re.S)
    assert len(blocks) == 1, "docs/workflows.md must hold exactly one deliver-export recipe"
    return str(blocks[0])


class Fakes:
    """The outside world of the recipe, kept in tables of the test database: the provider's export
    (running for `polls_until_done` polls), the customer's endpoint (failing its first `push_failures`
    pushes), and the stamp (its first write crashes after the push went out)."""

    def __init__(self, db: DB, polls_until_done: int, push_failures: int) -> None:
        self.db = db
        self.polls_until_done = polls_until_done
        self.push_failures = push_failures
        db.rows("CREATE TABLE polls (export_id text, at timestamptz DEFAULT clock_timestamp())")
        db.rows("CREATE TABLE pushes (account text, url text, ok boolean)")
        db.rows("CREATE TABLE stamps (export_id text PRIMARY KEY, stamped_at timestamptz DEFAULT now())")
        self.stamp_crashes = 1

    def status(self, export_id: str) -> SimpleNamespace:
        """provider.status: 'running' for the first polls, then 'done' with the result's URL."""
        conn = DB(self.db.dsn)
        try:
            conn.rows("INSERT INTO polls (export_id) VALUES (%s)", [export_id])
            polls = conn.value("SELECT count(*) FROM polls WHERE export_id = %s", [export_id])
        finally:
            conn.close()
        done = polls > self.polls_until_done
        return SimpleNamespace(state="done" if done else "running", url=f"https://files/{export_id}" if done else None)

    def push(self, account: str, url: str) -> None:
        """customer_api.push: fails the first `push_failures` times."""
        conn = DB(self.db.dsn)
        try:
            failed = conn.value("SELECT count(*) FROM pushes WHERE NOT ok")
            ok = failed >= self.push_failures
            conn.rows("INSERT INTO pushes VALUES (%s, %s, %s)", [account, url, ok])
        finally:
            conn.close()
        if not ok:
            raise ConnectionError("customer endpoint unavailable")

    def is_stamped(self, export_id: str) -> bool:
        """deliveries.is_stamped."""
        conn = DB(self.db.dsn)
        try:
            return bool(conn.value("SELECT count(*) FROM stamps WHERE export_id = %s", [export_id]))
        finally:
            conn.close()

    def stamp(self, export_id: str) -> None:
        """deliveries.stamp: the first call dies before writing, like a worker crashing there."""
        if self.stamp_crashes:
            self.stamp_crashes -= 1
            raise RuntimeError("crashed between push and stamp")
        conn = DB(self.db.dsn)
        try:
            conn.rows("INSERT INTO stamps (export_id) VALUES (%s) ON CONFLICT DO NOTHING", [export_id])
        finally:
            conn.close()


def test_poll_then_deliver_recipe_delivers_at_least_once_and_stamps_once(pgq_dsn: str, db: DB) -> None:
    fakes = Fakes(db, polls_until_done=3, push_failures=2)
    namespace: dict[str, Any] = {
        "__name__": "recipe", "DSN": pgq_dsn, "provider": SimpleNamespace(status=fakes.status),
        "customer_api": SimpleNamespace(push=fakes.push),
        "deliveries": SimpleNamespace(is_stamped=fakes.is_stamped, stamp=fakes.stamp),
    }
    exec(compile(recipe_code(), str(PAGE), "exec"), namespace)
    app: pgq.App = namespace["app"]
    # Test speed only: poll every 0.1 s instead of 10 s, and retry deliveries after 0.05 s, not 5 s.
    namespace["POLL_EVERY"] = 0.1
    namespace["deliver"].retry = pgq.Backoff(initial=0.05, min_delay=0.05, max_delay=0.05, jitter=0)
    ids: dict[str, int] = {}

    async def before(q: pgq.AsyncQueue) -> None:
        ids["poll"] = await namespace["wait_for_export"].defer_async(export_id="e1", account="acme")

    async def done(q: pgq.AsyncQueue) -> bool:
        return db.value("SELECT count(*) FROM pgq.jobs WHERE kind = 'deliver' AND status = 'succeeded'") == 1

    asyncio.run(run_worker_until(app, done, before=before, queues=["exports", "deliveries"], timeout=30))

    poll = db.rows("SELECT status::text AS status, attempts FROM pgq.jobs WHERE id = %s", [ids["poll"]])[0]
    assert poll == {"status": "succeeded", "attempts": 1}  # polls are snoozes: no attempt spent
    assert db.value("SELECT count(*) FROM polls") == 4
    [delivery] = db.rows("SELECT queue, payload, dedupe_key, attempts, max_attempts FROM pgq.jobs "
                         "WHERE kind = 'deliver'")
    assert delivery == {"queue": "deliveries", "dedupe_key": "deliver:e1", "max_attempts": 50, "attempts": 4,
                        "payload": {"export_id": "e1", "account": "acme", "url": "https://files/e1"}}
    # Two failed pushes, one that went out before the crash, one after the re-run: at least once.
    assert [r["ok"] for r in db.rows("SELECT ok FROM pushes")] == [False, False, True, True]
    assert db.value("SELECT count(*) FROM stamps") == 1  # stamped once
