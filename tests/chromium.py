"""Debian's chromium, headless, driven through the DevTools protocol (no driver, nothing downloaded:
infra/browser/install-chromium.sh installs the distribution's package when it is missing).
Used by the HTML report's test and the Prefect UI's test."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]


class Chromium:
    """One headless chromium with one page, its profile in `profile` (a fresh folder)."""

    def __init__(
        self, profile: Path, window: tuple[int, int] = (1000, 2400), args: tuple[str, ...] = ()
    ) -> None:
        binary = subprocess.run(
            [str(REPO / "infra/browser/install-chromium.sh")],
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        ).stdout.strip()
        self.process = subprocess.Popen(
            [
                binary,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--disable-dev-shm-usage",
                f"--user-data-dir={profile}",
                "--remote-debugging-port=0",
                f"--window-size={window[0]},{window[1]}",
                *args,
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            active = profile / "DevToolsActivePort"
            for _ in range(300):
                if active.is_file() and active.read_text().count("\n") >= 1:
                    break
                time.sleep(0.1)
            port = int(active.read_text().splitlines()[0])
            targets = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
            page = next(t for t in targets if t["type"] == "page")
            from websockets.sync.client import connect

            self.socket = connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=10)
        except BaseException:
            self.process.kill()
            self.process.wait(timeout=10)
            raise
        self.next_id = 0
        self.events: list[dict] = []

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=60))
            if message.get("id") == self.next_id:
                assert "error" not in message, message
                return message["result"]
            self.events.append(message)

    def evaluate(self, expression: str):
        result = self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        assert "exceptionDetails" not in result, result
        return result["result"].get("value")

    def navigate(self, url: str, timeout: float = 30) -> None:
        """Open `url` and wait until the document has loaded (a single-page app renders after that:
        wait for what you need with `wait_until`)."""
        self.call("Page.navigate", url=url)
        self.wait_until("document.readyState === 'complete'", timeout, f"{url} to load")

    def wait_until(self, expression: str, timeout: float, what: str, interval: float = 0.25):
        """Poll a JavaScript expression until it is truthy; return its value."""
        deadline = time.time() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.time() > deadline:
                raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
            time.sleep(interval)

    def click(self, element: str, what: str | None = None) -> None:
        """Click, with the mouse, the element a JavaScript expression gives (scrolled into view first):
        real pointer events, so the page's own handlers (React, Vue, Radix menus) see a user's click."""
        x, y = self.locate(element, what)
        self.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
        self.call(
            "Input.dispatchMouseEvent", type="mousePressed", x=x, y=y, button="left", clickCount=1
        )
        self.call(
            "Input.dispatchMouseEvent", type="mouseReleased", x=x, y=y, button="left", clickCount=1
        )

    def type_into(self, element: str, text: str, what: str | None = None) -> None:
        """Click into a text field, select what it holds and type `text` over it (as keyboard input,
        so the page's input handlers run)."""
        self.click(element, what)
        self.evaluate(
            "(() => { const e = document.activeElement; if (e && e.select) e.select(); })()"
        )
        self.call("Input.insertText", text=text)

    def press(
        self, key: str, code: str, key_code: int, *, modifiers: int = 0, command: str | None = None
    ) -> None:
        """Press and release one key on the focused element (`modifiers`: 2 is Ctrl); `command`, an
        editing command the key does there ("selectAll"), since a synthetic key event runs none."""
        for kind in ("keyDown", "keyUp"):
            self.call(
                "Input.dispatchKeyEvent",
                type=kind,
                key=key,
                code=code,
                modifiers=modifiers,
                windowsVirtualKeyCode=key_code,
                commands=[command] if command and kind == "keyDown" else [],
            )

    def locate(self, element: str, what: str | None = None) -> tuple[float, float]:
        """The centre, in the viewport, of the element a JavaScript expression gives."""
        point = self.evaluate(f"""(() => {{
            const e = ({element});
            if (!e) return null;
            e.scrollIntoView({{block: "center", inline: "center"}});
            const b = e.getBoundingClientRect();
            return b.width && b.height ? [b.x + b.width / 2, b.y + b.height / 2] : null;
        }})()""")
        if not point:
            raise LookupError(f"no visible element: {what or element}")
        return point[0], point[1]

    def screenshot(self, path: Path, full_page: bool = True) -> bytes:
        shot = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=full_page)
        png = base64.b64decode(shot["data"])
        path.write_bytes(png)
        return png

    def close(self) -> None:
        try:
            self.socket.close()
        finally:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
