"""Typed payloads: `Task` is generic over its handler's parameters, so mypy checks `defer`,
`defer_async`, `spec` and direct calls against the handler's signature."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from mypy import api

ROOT = Path(__file__).resolve().parents[2]

# Every line that mypy must report ends with "# error"; no other line may be reported.
SNIPPET = textwrap.dedent('''
    from __future__ import annotations

    import asyncio

    import pgq

    app = pgq.App("postgresql://localhost/db")


    @app.task
    def send_email(to: str, subject: str, cc: list[str] | None = None) -> None:
        pass


    @app.task(queue="fetch", on_success=send_email)
    async def fetch(url: str, retries: int = 3) -> int:
        return retries


    @app.periodic(every=60)
    def tidy_up(days: int = 7) -> int:
        return days


    hourly = app.periodic(every=3600, name="hourly")(tidy_up)  # a schedule on an existing task


    async def produce() -> None:
        ids: list[int] = [
            send_email.defer(to="a@example.com", subject="hi"),
            send_email.defer("a@example.com", "hi", cc=["b@example.com"]),
            send_email.configure(delay=10, queue="mail").defer(to="a@example.com", subject="hi"),
            fetch.defer(url="https://example.com"),
            await fetch.defer_async(url="https://example.com", retries=1),
            await fetch.configure(priority=1).defer_async("https://example.com"),
            tidy_up.defer(days=1),
        ]
        pgq.after_success(send_email, {"to": "a@example.com", "subject": "hi"})
        app.queue.enqueue_many([send_email.spec(to="a@example.com", subject="hi")])
        count: int = tidy_up(days=2)
        result: int = await fetch(url="https://example.com")
        print(ids, count, result)

        send_email.defer(to=1, subject="hi")  # error
        send_email.defer(to="a@example.com")  # error
        send_email.defer(to="a@example.com", subject="hi", bcc="c@example.com")  # error
        send_email.configure(delay=10).defer(to="a@example.com", subject=2)  # error
        send_email.spec(to=None, subject="hi")  # error
        await fetch.defer_async(url=1)  # error
        await fetch.defer_async()  # error
        fetch.defer(url="https://example.com", retry=2)  # error
        tidy_up.defer(days="7")  # error
        wrong: str = tidy_up(days=2)  # error
        hourly.defer(days=[7])  # error


    asyncio.run(produce())
''')


@pytest.mark.slow
def test_mypy_checks_defer_arguments_against_the_handler_signature(tmp_path: Path) -> None:
    snippet = tmp_path / "snippet.py"
    snippet.write_text(SNIPPET)
    expected = {n for n, line in enumerate(SNIPPET.splitlines(), 1) if line.endswith("# error")}
    assert len(expected) == 11

    out, err, status = api.run([
        str(snippet), "--config-file", str(ROOT / "pyproject.toml"),
        "--cache-dir", str(ROOT / ".mypy_cache" / "typed-payloads"), "--no-error-summary", "--show-error-codes",
    ])

    assert err == ""
    reported = {int(m.group(1)) for m in re.finditer(r"^.*snippet\.py:(\d+): error:", out, re.MULTILINE)}
    assert reported == expected, out
    assert status == 1
    # The errors name what is wrong: the type, the missing argument, the unknown keyword.
    assert 'Argument "to" to "defer" of "Task" has incompatible type "int"; expected "str"' in out
    assert 'Missing positional argument "subject"' in out or 'Missing named argument "subject"' in out
    assert 'Unexpected keyword argument "bcc"' in out
