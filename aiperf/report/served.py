"""The reports `make serve` serves over HTTP, and the links a run's artifacts give them.

`make serve` (infra/prefect/serve.sh) runs `python -m aiperf.report.served`: a read-only HTTP server on
127.0.0.1:$AIPERF_REPORTS_PORT (4201) over one folder, $AIPERF_REPORTS_DIR: by default the
checkout's aiperf-out, which is where a flow run of its deployments writes with the profiles' own
`out` (the worker runs them in the checkout). It exports AIPERF_REPORTS_URL, the server's address,
to its worker, so a flow run's link artifacts (its HTML report, its event log) point there
(`file_link`); a file the server would not serve keeps its file:// link, which the Prefect UI
shows as text.

What is served, and why it is safe enough without the UI's basic authentication:

- Only the files a run publishes (`servable`): HTML reports (`reports/aiperf-report-*.html`) and
  event logs (`run-*/events.log`), at any depth below the folder (so an `out` inside it is served
  too). Nothing else under it: not the staged data (a licensed dataset such as ImageNet), the
  weights, the batch jobs' logs, nor the cluster's TLS keys, which live in the same `out` folder.
  No directory listing, GET and HEAD only, and a path whose real location (symbolic links
  followed) leaves the folder is refused as if it did not exist.
- It listens on the loopback address only, like the Prefect server it stands beside.
- What it serves holds no secret: a report and an event log are what `aiperf package` bundles for
  others to review, with database passwords withheld (aiperf.urls). Reading one starts nothing,
  whereas the Prefect API starts flow runs as the worker's user, which is why that API takes basic
  authentication. Asking for the auth string here too would have a browser prompt for it on every
  report link opened from the UI, which keeps its login in its own page storage, not the
  browser's; a user who shares the machine with people who must not read the reports sets the
  folder's permissions, or AIPERF_REPORTS_PORT=0 to serve nothing.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path, PurePosixPath
from typing import BinaryIO
from urllib.parse import quote, unquote, urlsplit

from aiperf import settings
from aiperf.errors import UserError
from aiperf.paths import is_published

HOST = "127.0.0.1"


def servable(relative: PurePosixPath) -> bool:
    """Whether a path relative to the served folder names a file the server hands out: a report
    page in a `reports` folder, or an event log in a `run-*` folder; never a hidden part nor `..`."""
    parts = relative.parts
    if len(parts) < 2 or any(part in ("", ".", "..") or part.startswith(".") for part in parts):
        return False
    return is_published(parts[-2], parts[-1])


def served_url(path: Path, root: Path, base_url: str) -> str | None:
    """The address of `path` on the server of `root` at `base_url`, or None when it would not serve
    it (outside the folder, or not a report or event log)."""
    try:
        relative = path.resolve().relative_to(root.resolve())
    except ValueError:
        return None
    posix = PurePosixPath(relative.as_posix())
    if not servable(posix):
        return None
    return base_url.rstrip("/") + "/" + quote(posix.as_posix())


def file_link(path: Path) -> str:
    """The link a run's artifact gives one of its files: its address on the reports server when the
    process runs under `make serve` (AIPERF_REPORTS_URL and AIPERF_REPORTS_DIR set) and the server
    serves it, else its file:// URI."""
    base, root = settings.REPORTS_URL.raw(), settings.REPORTS_DIR.raw()
    if base and root:
        url = served_url(path, Path(root), base)
        if url is not None:
            return url
    return path.resolve().as_uri()


class ReportHandler(SimpleHTTPRequestHandler):
    """GET and HEAD of `servable` files below the server's folder; 404 for anything else."""

    server_version = "aiperf-reports"
    root: Path  # the served folder, resolved (set by `make_server`)

    def send_head(self) -> io.BytesIO | BinaryIO | None:
        """Opens the file a request names if it may be served; the base class then sends it."""
        address = unquote(urlsplit(self.path).path)
        if address == "/":
            return self._text(
                HTTPStatus.OK,
                "aiperf reports: open a run's report from its flow run's artifacts\n",
            )
        relative = PurePosixPath(address.lstrip("/"))
        target = (self.root / relative).resolve()
        if (
            not servable(relative)
            or not target.is_relative_to(self.root)
            or not servable(PurePosixPath(target.relative_to(self.root).as_posix()))
            or not target.is_file()
        ):
            self.send_error(HTTPStatus.NOT_FOUND, "not a report or event log of this server")
            return None
        self.path = "/" + quote(target.relative_to(self.root).as_posix())
        return super().send_head()

    def translate_path(self, path: str) -> str:
        """The file of an address `send_head` has already checked and made relative to the root."""
        return str(self.root / unquote(urlsplit(path).path).lstrip("/"))

    def list_directory(self, path: str | os.PathLike[str]) -> io.BytesIO | None:
        self.send_error(HTTPStatus.NOT_FOUND, "no listings here")
        return None

    def _text(self, status: HTTPStatus, text: str) -> io.BytesIO:
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        return io.BytesIO(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002  # the base's name
        sys.stderr.write(f"{self.address_string()} {format % args}\n")


def make_server(root: Path, port: int) -> ThreadingHTTPServer:
    """A server of `root` on 127.0.0.1:`port` (0: any free port), bound but not yet serving."""
    if not root.is_dir():
        raise UserError(
            f"reports folder {root} does not exist; create it or set AIPERF_REPORTS_DIR"
        )
    handler = type("Handler", (ReportHandler,), {"root": root.resolve()})
    try:
        return ThreadingHTTPServer((HOST, port), handler)
    except (OSError, OverflowError) as error:
        why = getattr(error, "strerror", None) or error
        raise UserError(
            f"cannot serve reports on {HOST}:{port} ({why}); set AIPERF_REPORTS_PORT to a free "
            "port, or 0 to serve none"
        ) from None


def main(argv: list[str] | None = None) -> int:
    """`python -m aiperf.report.served [--root DIR] [--port N]`: serve until killed."""
    parser = argparse.ArgumentParser(
        prog="python -m aiperf.report.served", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--root", type=Path, default=None, help="the folder (AIPERF_REPORTS_DIR)")
    parser.add_argument("--port", type=int, default=None, help="the port (AIPERF_REPORTS_PORT)")
    options = parser.parse_args(argv)
    try:
        root = options.root or Path(settings.REPORTS_DIR.raw() or "aiperf-out")
        port = (
            options.port
            if options.port is not None
            else int(settings.number(settings.REPORTS_PORT))
        )
        server = make_server(root, port)
    except UserError as error:
        print(f"aiperf.report.served: {error}", file=sys.stderr)
        return 2
    print(
        f"serving the reports of {root.resolve()} on http://{HOST}:{server.server_port}",
        flush=True,
    )
    with server:
        server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
