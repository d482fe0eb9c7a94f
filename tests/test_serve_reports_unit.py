"""Issue 26 item 4: the reports server of `make serve` (aiperf/report/served.py) and the links a run's
artifacts give (`file_link`), without Prefect: the server runs here on a free loopback port."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest

from aiperf import settings
from aiperf.paths import event_log_path, report_path
from aiperf.report.served import file_link, main, make_server, servable, served_url

DB = "sqlite:///aiperf.db"


@pytest.mark.parametrize(
    "relative, served",
    [
        ("reports/aiperf-report-aiperf-0123abcd-1.html", True),
        ("nightly/reports/aiperf-report-x-2.html", True),
        ("run-aiperf-0123abcd-1/events.log", True),
        ("run-aiperf-0123abcd-1/weights/trial-1.weights.h5", False),
        ("run-aiperf-0123abcd-1/tls/key.pem", False),
        ("reports/notes.html", False),
        ("aiperf-report-x-1.html", False),  # not in a reports folder
        ("reports/../reports/aiperf-report-x-1.html", False),
        (".hidden/reports/aiperf-report-x-1.html", False),
        ("data/run-x/events.log/../secret", False),
    ],
)
def test_only_reports_and_event_logs_are_servable(relative: str, served: bool) -> None:
    assert servable(PurePosixPath(relative)) is served


def test_a_run_s_files_under_the_served_folder_get_its_address(tmp_path: Path) -> None:
    out = tmp_path / "aiperf-out"
    page, log = report_path(str(out), DB, 7), event_log_path(str(out), DB, 7)
    base = "http://127.0.0.1:4201/"
    assert served_url(page, out, base) == base + page.relative_to(out).as_posix()
    assert served_url(log, out, base) == base + log.relative_to(out).as_posix()
    # a space is quoted, and the folder may be given relative or through a symbolic link
    spaced = report_path(str(out / "my runs"), DB, 1)
    assert served_url(spaced, out, base) == base + "my%20runs/" + spaced.relative_to(
        out / "my runs"
    ).as_posix().replace(" ", "%20")
    (tmp_path / "link").symlink_to(out, target_is_directory=True)
    assert served_url(page, tmp_path / "link", base) is not None
    # outside the folder, or a file it does not serve: no address
    assert served_url(report_path(str(tmp_path / "elsewhere"), DB, 7), out, base) is None
    assert served_url(out / "run-x" / "weights" / "trial-1.weights.h5", out, base) is None


def test_the_link_is_the_served_address_only_under_make_serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "aiperf-out"
    page = report_path(str(out), DB, 3)
    monkeypatch.delenv(settings.REPORTS_URL.name, raising=False)
    monkeypatch.setenv(settings.REPORTS_DIR.name, str(out))
    assert file_link(page) == page.resolve().as_uri()  # not under make serve: today's file:// link
    monkeypatch.setenv(settings.REPORTS_URL.name, "http://127.0.0.1:4301")
    assert file_link(page) == "http://127.0.0.1:4301/" + page.relative_to(out).as_posix()
    elsewhere = report_path(str(tmp_path / "other-out"), DB, 3)
    assert file_link(elsewhere) == elsewhere.resolve().as_uri()  # a run with its own out


@pytest.fixture
def reports_server(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    root = tmp_path / "aiperf-out"
    page = report_path(str(root), DB, 1)
    page.parent.mkdir(parents=True)
    page.write_text("<title>aiperf run 1</title>")
    log = event_log_path(str(root), DB, 1)
    log.parent.mkdir(parents=True)
    log.write_text(':::MLLOG {"key": "run_start"}\n')
    (log.parent / "weights").mkdir()
    (log.parent / "weights" / "trial-1.weights.h5").write_bytes(b"weights")
    (tmp_path / "secret.txt").write_text("outside")
    # a report-shaped name that leads outside the folder through a symbolic link
    (root / "reports" / "aiperf-report-escape-1.html").symlink_to(tmp_path / "secret.txt")
    server = make_server(root, 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_port, root
    finally:
        server.shutdown()
        server.server_close()


def _get(port: int, path: str, method: str = "GET") -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(method, path)
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


def test_the_server_hands_out_reports_and_event_logs_and_nothing_else(reports_server) -> None:
    port, root = reports_server
    page = report_path(str(root), DB, 1).relative_to(root).as_posix()
    log = event_log_path(str(root), DB, 1).relative_to(root).as_posix()
    assert _get(port, "/" + page) == (200, b"<title>aiperf run 1</title>")
    status, body = _get(port, "/" + log)
    assert status == 200 and b"run_start" in body
    assert _get(port, "/" + page, "HEAD")[0] == 200
    refused = [
        "/" + log.replace("events.log", "weights/trial-1.weights.h5"),  # weights: not published
        "/reports/",  # no listing
        "/run-x/",
        "/../secret.txt",
        "/reports/%2e%2e/%2e%2e/secret.txt",
        "/reports/..%2f..%2fsecret.txt",
        "//reports/../../secret.txt",
        "/reports/aiperf-report-escape-1.html",  # a symbolic link out of the folder
        "/reports/aiperf-report-missing-9.html",
    ]
    for path in refused:
        status, body = _get(port, path)
        assert status == 404, (path, status)
        assert b"outside" not in body
    assert _get(port, "/" + page, "POST")[0] == 501  # read-only
    assert _get(port, "/")[0] == 200  # a line saying what this is, for serve.sh's readiness check


def test_a_taken_port_is_one_line_naming_the_fix(tmp_path: Path, capsys) -> None:
    first = make_server(tmp_path, 0)
    try:
        assert main(["--root", str(tmp_path), "--port", str(first.server_port)]) == 2
    finally:
        first.server_close()
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "AIPERF_REPORTS_PORT" in error
    assert main(["--root", str(tmp_path / "missing"), "--port", "0"]) == 2
    assert "AIPERF_REPORTS_DIR" in capsys.readouterr().err
