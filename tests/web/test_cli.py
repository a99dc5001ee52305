"""`pgq dashboard`: the refusal to listen on a non-loopback address without --auth, argument checks,
the message without the web extra, and the real server started by the command."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from pgq.cli import main
from pgq.cli.dashboard import is_loopback
from tests.conftest import reap


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """uvicorn.run replaced by a recorder: the command does everything but serve."""
    import uvicorn

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kwargs: calls.append({"app": app, **kwargs}))
    monkeypatch.delenv("PGQ_DASHBOARD_AUTH", raising=False)
    return calls


def test_app_is_imported_from_the_current_directory_as_in_pgq_worker(
        capsys: pytest.CaptureFixture[str], pgq_dsn: str, served: list[dict[str, Any]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "wf_dash_app.py").write_text(
        "import pgq\napp = pgq.App('postgresql://unused')\n\n"
        "@app.periodic(every=60)\ndef tidy_up() -> None:\n    pass\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "wf_dash_app", raising=False)
    try:
        code, err = run_cli(capsys, "dashboard", "--dsn", pgq_dsn, "--app", "wf_dash_app:app")
    finally:
        sys.modules.pop("wf_dash_app", None)
    assert code == 0, err
    assert len(served) == 1


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "10.1.2.3", "192.168.0.10", "example.invalid"])
def test_a_non_loopback_address_without_auth_is_refused(capsys: pytest.CaptureFixture[str], pgq_dsn: str,
                                                        served: list[dict[str, Any]], host: str) -> None:
    code, err = run_cli(capsys, "dashboard", "--dsn", pgq_dsn, "--host", host)

    assert code == 2
    assert err.count("\n") == 1 and err.startswith("pgq: error: refusing to serve the dashboard on")
    assert "--auth" in err and "127.0.0.1" in err
    assert served == []


def test_with_auth_a_non_loopback_address_is_served(capsys: pytest.CaptureFixture[str], pgq_dsn: str,
                                                    served: list[dict[str, Any]],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    code, err = run_cli(capsys, "dashboard", "--dsn", pgq_dsn, "--host", "0.0.0.0", "--auth", "ops:pw",
                        "--port", "9999", "--read-only")
    assert code == 0 and served[0]["host"] == "0.0.0.0" and served[0]["port"] == 9999
    assert "password required" in err and "read-only" in err and "TLS" in err

    monkeypatch.setenv("PGQ_DASHBOARD_AUTH", "ops:pw")
    assert run_cli(capsys, "dashboard", "--dsn", pgq_dsn, "--host", "0.0.0.0")[0] == 0
    assert len(served) == 2


def test_loopback_is_served_without_auth_to_local_host_names_only(capsys: pytest.CaptureFixture[str], pgq_dsn: str,
                                                                  served: list[dict[str, Any]]) -> None:
    code, err = run_cli(capsys, "dashboard", "--dsn", pgq_dsn)
    assert code == 0 and served[0]["host"] == "127.0.0.1" and served[0]["port"] == 8787
    assert "http://127.0.0.1:8787/" in err

    # The served app answers this machine's names, not a name re-pointed at it (DNS rebinding).
    from starlette.testclient import TestClient

    with TestClient(served[0]["app"], base_url="http://127.0.0.1:8787") as client:
        assert client.get("/api/queues").status_code == 200
        assert client.get("/api/queues", headers={"Host": "localhost:8787"}).status_code == 200
        assert client.get("/api/queues", headers={"Host": "rebound.example:8787"}).status_code == 400


def test_with_auth_any_host_name_is_answered(capsys: pytest.CaptureFixture[str], pgq_dsn: str,
                                             served: list[dict[str, Any]]) -> None:
    assert run_cli(capsys, "dashboard", "--dsn", pgq_dsn, "--auth", "u:p")[0] == 0
    from starlette.testclient import TestClient

    with TestClient(served[0]["app"], base_url="http://dash.example.com") as client:
        assert client.get("/api/queues", auth=("u", "p")).status_code == 200


@pytest.mark.parametrize("auth", ["nopassword", ":pw", "user:", ":"])
def test_malformed_auth_is_a_usage_error(capsys: pytest.CaptureFixture[str], pgq_dsn: str,
                                         served: list[dict[str, Any]], auth: str) -> None:
    code, err = run_cli(capsys, "dashboard", "--dsn", pgq_dsn, "--auth", auth)
    assert code == 2 and "USER:PASSWORD" in err and served == []


def test_no_dsn_and_bad_port_are_usage_errors(capsys: pytest.CaptureFixture[str], served: list[dict[str, Any]],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGQ_DSN", raising=False)
    assert run_cli(capsys, "dashboard")[0] == 2
    assert run_cli(capsys, "dashboard", "--dsn", "x", "--port", "70000")[0] == 2


def test_an_unmigrated_database_is_refused_before_serving(capsys: pytest.CaptureFixture[str], pgq_empty_dsn: str,
                                                          served: list[dict[str, Any]]) -> None:
    code, err = run_cli(capsys, "dashboard", "--dsn", pgq_empty_dsn)
    assert code == 1 and "pgq migrate" in err and served == []


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.9.8.7", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("::ffff:127.0.0.1", True), ("0.0.0.0", False), ("::", False), ("", False), ("10.0.0.1", False),
    ("8.8.8.8", False), ("no-such-host.invalid", False),
])
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_without_the_web_extra_the_command_says_what_to_install(pgq_dsn: str) -> None:
    code = ("import sys\n"
            "sys.modules['starlette'] = None  # as if the extra were not installed\n"
            "from pgq.cli import main\n"
            f"sys.exit(main(['dashboard', '--dsn', {pgq_dsn!r}]))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr.strip() == ("pgq: error: the pgq dashboard needs the web extra (starlette is not installed): "
                                     "pip install 'pgq-jobs[web]'")


def test_pgq_help_works_without_the_web_extra() -> None:
    code = ("import sys\n"
            "for name in ('starlette', 'jinja2', 'uvicorn'): sys.modules[name] = None\n"
            "import pgq\n"
            "from pgq.cli import main\n"
            "sys.exit(main(['--help']))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "dashboard" in result.stdout


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_command_serves_the_dashboard_until_sigterm(pgq_dsn: str) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PGQ_DSN", "PGQ_DASHBOARD_AUTH")}
    proc = subprocess.Popen([sys.executable, "-m", "pgq", "dashboard", "--dsn", pgq_dsn, "--port", str(port),
                             "--auth", "ops:pw"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/api/queues", auth=("ops", "pw"), timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "the dashboard did not start"
                time.sleep(0.1)
        assert response.status_code == 200 and response.json()["queues"] == []
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=2).status_code == 401
        assert "server" not in response.headers
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
        # uvicorn shuts down cleanly, then re-raises the signal, as a process ended by it should.
        assert proc.returncode in (0, -signal.SIGTERM), err
        assert "Application shutdown complete" in err
        assert f"pgq dashboard on http://127.0.0.1:{port}/" in err
    finally:
        reap(proc)
