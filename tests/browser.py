"""A real headless Chromium driven through the DevTools protocol over a pipe (stdlib only):
``--remote-debugging-pipe`` reads NUL-terminated JSON commands on fd 3 and answers on fd 4."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-pipe",
]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One headless Chromium with one page at a time (``open``); ``evaluate`` runs JavaScript
    in it. tests/conftest.py's ``browser`` fixture launches one for a whole session."""

    def __init__(self, executable: str) -> None:
        self._profile = tempfile.TemporaryDirectory(prefix="chesslm-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def fds() -> None:  # in the child: the pipe ends on fds 3 and 4 (copies first, as
            # either end may itself be fd 3 or 4)
            read, write = os.dup(to_child_r), os.dup(from_child_w)
            os.dup2(read, 3)
            os.dup2(write, 4)

        self.process = subprocess.Popen(
            [executable, *CHROMIUM_FLAGS, f"--user-data-dir={self._profile.name}", "about:blank"],
            preexec_fn=fds,
            pass_fds=(3, 4),  # kept open in the child after fds() (close_fds runs later)
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._buffer = b""
        self._next_id = 0
        self.session: str | None = None
        self.target: str | None = None

    def send(self, method: str, params: dict[str, Any] | None = None, **kw: Any) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}, **kw}
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def _read(self) -> dict:
        while b"\0" not in self._buffer:
            chunk = os.read(self._from_child, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed its DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def open(self, url: str, *, viewport: tuple[int, int] | None = None) -> None:
        """A new page at ``url``, laid out from the start at ``viewport`` (width, height in CSS
        pixels) if given: the size is set on a blank page, before ``url`` loads."""
        if self.target is not None:  # one page at a time: the last one's scripts stop
            self.send("Target.closeTarget", {"targetId": self.target})
        target = self.target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        attached = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})
        self.session = attached["sessionId"]
        if viewport:
            width, height = viewport
            metrics = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}
            self.send("Emulation.setDeviceMetricsOverride", metrics, sessionId=self.session)
        self.send("Page.navigate", {"url": url}, sessionId=self.session)

    def screenshot(self, path: Path) -> Path:
        """The page's viewport as a PNG at ``path``: what a person sees."""
        shot = self.send("Page.captureScreenshot", {"format": "png"}, sessionId=self.session)
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def evaluate(self, expression: str) -> Any:
        result = self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            sessionId=self.session,
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30) -> Any:
        """Poll ``expression`` until it is truthy; its last value otherwise."""
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.2)
        return value

    def wait_until_stable(self, expression: str, pause: float = 0.5, timeout: float = 30) -> Any:
        """Poll ``expression`` until it gives the same value twice ``pause`` seconds apart (a
        page that its scripts still restyle after load); its last value otherwise."""
        deadline = time.monotonic() + timeout
        value = self.evaluate(expression)
        while time.monotonic() < deadline:
            time.sleep(pause)
            previous, value = value, self.evaluate(expression)
            if value == previous:
                break
        return value

    def show_report_image(self, path: str) -> list[int] | None:
        """In a Snakemake HTML report: what a click on the item ``path``'s view button does
        (ToggleViewManager.handleImg); [width, height] once its image is drawn, else None."""
        uri = f"results[{json.dumps(path)}].data_uri"
        self.evaluate(
            f"app.setView({{content: 'img', contentPath: {uri}, resultPath: {json.dumps(path)}}})"
        )
        return self.wait_for(
            "(() => { const i = [...document.querySelectorAll('img')].find(i =>"
            f" i.src === {uri}); return i && i.complete && i.naturalWidth > 100 ?"
            " [i.naturalWidth, i.naturalHeight] : null })()"
        )

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_child)
        os.close(self._from_child)
        self._profile.cleanup()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def file_url(path: Path) -> str:
    return path.resolve().as_uri()
