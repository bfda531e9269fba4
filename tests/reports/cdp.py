"""A small Chrome DevTools Protocol client over a pipe, for driving headless Chromium in tests.

Chromium started with --remote-debugging-pipe reads protocol messages on fd 3 and writes them on
fd 4 (JSON, each ended by a NUL byte); no port, no websocket library. `Browser` opens one page,
collects its console messages and uncaught exceptions, evaluates JavaScript, and clicks and types
as a user would (Input.dispatchMouseEvent at an element's centre, Input.insertText).
"""
from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)


class CdpError(RuntimeError):
    pass


class Browser:
    """One headless Chromium with one page; use as a context manager."""

    def __init__(self, *, timeout_s: float = 60.0, width: int = 1280, height: int = 1600) -> None:
        if CHROMIUM is None:
            raise CdpError("chromium is not installed")
        self.timeout_s = timeout_s
        self.console: list[str] = []  # "level: text" of every console message
        self.exceptions: list[str] = []
        self._buffer = b""
        self._id = 0
        self._events: list[dict] = []
        self._profile = tempfile.mkdtemp(prefix="rooflab-cdp-")
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def wire() -> None:  # in the child: the protocol's two descriptors
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        self._proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--remote-debugging-pipe",
             f"--user-data-dir={self._profile}", f"--window-size={width},{height}", "about:blank"],
            pass_fds=(3, 4), preexec_fn=wire, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._size = (width, height)
        self._target = self._session = ""
        self._attach()

    def _attach(self) -> None:
        """Open a fresh page (a target of its own) and drive it from now on."""
        width, height = self._size
        self._target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self.call("Target.attachToTarget", {"targetId": self._target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime"):
            self.call(f"{domain}.enable", session=True)
        self.call("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                          "mobile": False}, session=True)

    def new_page(self) -> None:
        """Close the page and open a fresh one in the same Chromium (no second start-up: a
        Chromium costs two CPU seconds to start), with no console messages or exceptions yet; what
        the closed page sends afterwards is not heard."""
        self.call("Target.closeTarget", {"targetId": self._target})
        self.console, self.exceptions, self._events = [], [], []
        self._attach()

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        for fd in (self._to_chrome, self._from_chrome):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self._profile, ignore_errors=True)

    # --- the protocol ---

    def _send(self, method: str, params: dict | None, session: bool) -> int:
        self._id += 1
        message: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self._session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        return self._id

    def _receive(self, deadline: float) -> dict:
        """The next message: an answer, or an event of the browser or of this page (the events of
        a page closed by new_page are dropped)."""
        while True:
            while b"\0" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self._from_chrome], [], [], left)[0]:
                    raise CdpError("no answer from chromium in time")
                chunk = os.read(self._from_chrome, 1 << 20)
                if not chunk:
                    raise CdpError("chromium closed its pipe")
                self._buffer += chunk
            raw, _, self._buffer = self._buffer.partition(b"\0")
            message = json.loads(raw)
            if "method" not in message:
                return message
            if message.get("sessionId", self._session) == self._session:
                self._note(message)
                return message

    def _note(self, event: dict) -> None:
        method, params = event["method"], event.get("params", {})
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            self.console.append(f"{params.get('type')}: {text}")
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.exceptions.append(str(details.get("exception", {}).get("description") or details.get("text")))
        self._events.append(event)

    def call(self, method: str, params: dict | None = None, *, session: bool = False) -> dict:
        wanted = self._send(method, params, session)
        deadline = time.monotonic() + self.timeout_s
        while True:
            message = self._receive(deadline)
            if message.get("id") == wanted:
                if "error" in message:
                    raise CdpError(f"{method}: {message['error']}")
                return message.get("result", {})

    def wait_event(self, method: str) -> dict:
        deadline = time.monotonic() + self.timeout_s
        for i, event in enumerate(self._events):
            if event["method"] == method:
                return self._events.pop(i)
        while True:
            message = self._receive(deadline)
            if message.get("method") == method:
                self._events.remove(message)
                return message

    # --- what a test does with a page ---

    def open(self, url: str) -> None:
        """Navigate and wait for the load event."""
        self._events = [e for e in self._events if e["method"] != "Page.loadEventFired"]
        self.call("Page.navigate", {"url": url}, session=True)
        self.wait_event("Page.loadEventFired")

    def js(self, expression: str) -> Any:
        """The value of a JavaScript expression (awaited when it is a promise)."""
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True}, session=True)
        if "exceptionDetails" in result:
            raise CdpError(f"{expression!r}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 10.0) -> Any:
        """The value of `expression` once it is truthy (a click on a link changes the hash, and the
        page hears of it a moment later); CdpError when it is not within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = self.js(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise CdpError(f"{expression!r} still false after {timeout_s} s")
            time.sleep(0.02)

    def click(self, selector: str) -> None:
        """A left click at the centre of the first element matching `selector`, scrolled into view."""
        box = self.js(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); if (!e) return null;"
                      " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
                      " return [r.left + r.width / 2, r.top + r.height / 2]; })()")
        if box is None:
            raise CdpError(f"no element matches {selector!r}")
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", {"type": kind, "x": box[0], "y": box[1], "button": "left",
                                                   "clickCount": 1}, session=True)

    def type_into(self, selector: str, text: str) -> None:
        """Focus the element and type `text` into it."""
        self.click(selector)
        self.call("Input.insertText", {"text": text}, session=True)

    def select(self, selector: str, value: str) -> None:
        """Choose an option of a <select> as the user's choice does (its value, then a change event)."""
        self.js(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); e.focus(); e.value = "
                f"{json.dumps(value)}; e.dispatchEvent(new Event('change', {{bubbles: true}})); }})()")

    def screenshot(self, path: Path) -> None:
        import base64

        data = self.call("Page.captureScreenshot", {"format": "png"}, session=True)["data"]
        path.write_bytes(base64.b64decode(data))
