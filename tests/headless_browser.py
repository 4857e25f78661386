"""A headless Chromium driven over the DevTools protocol on a pipe, for tests/house/test_docs.py.

Chromium's `--remote-debugging-pipe` reads protocol commands from its fd 3 and writes
answers and events to its fd 4, each message JSON ended by a NUL byte: no WebSocket, no
port, nothing beyond the standard library.  `find_or_install()` finds the browser, or
installs Debian's `chromium-headless-shell` when it runs as root with apt-get; it returns
None with the reason otherwise.
"""
from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

BINARIES = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
PACKAGE = "chromium-headless-shell"          # the headless build: no GTK, about 64 MB
INSTALL_TIMEOUT_S = 600


def _installed() -> str | None:
    for name in BINARIES:
        if path := shutil.which(name):
            return path
    return None


def find_or_install() -> tuple[str | None, str]:
    """(path of a Chromium binary, "") or (None, why there is none)."""
    if path := _installed():
        return path, ""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return None, f"no Chromium ({', '.join(BINARIES)}) on PATH, and not root with apt-get to install {PACKAGE}"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        for command in (["apt-get", "update", "-qq"],
                        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", PACKAGE]):
            done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=INSTALL_TIMEOUT_S)
            if done.returncode != 0:
                return None, f"`{' '.join(command)}` failed: {(done.stderr or done.stdout).strip()[-500:]}"
    except subprocess.TimeoutExpired as exc:
        return None, f"`{' '.join(exc.cmd)}` took over {INSTALL_TIMEOUT_S} s"
    return (path, "") if (path := _installed()) else (None, f"{PACKAGE} installed but no binary on PATH")


def _high_fd(fd: int) -> int:
    """A duplicate of `fd` numbered 10 or more, so that moving it to 3 or 4 clobbers nothing."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


class Browser:
    """One headless Chromium with one page; `with Browser(binary) as b: b.open(url) ...`."""

    def __init__(self, binary: str, width: int = 1280, height: int = 900, timeout: float = 60.0):
        self.timeout = timeout
        self._profile = tempfile.TemporaryDirectory(prefix="fl-docs-chromium-")
        # Chromium logs freely; a file never fills up and blocks it as a pipe would.
        self._log = open(Path(self._profile.name) / "chromium.log", "w+b")
        to_browser_r, self._to_browser = (_high_fd(fd) for fd in os.pipe())
        self._from_browser, from_browser_w = (_high_fd(fd) for fd in os.pipe())

        # bash moves the two pipe ends to the fds Chromium reads (3) and writes (4) and closes
        # the originals; every other fd of this process stays out of the browser.
        move = f'exec "$0" "$@" 3<&{to_browser_r} 4>&{from_browser_w} {to_browser_r}<&- {from_browser_w}>&-'
        self._process = subprocess.Popen(
            ["bash", "-c", move, binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions",
             f"--window-size={width},{height}", f"--user-data-dir={self._profile.name}",
             "--remote-debugging-pipe", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._log,
            pass_fds=(to_browser_r, from_browser_w))
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Page.enable", session=True)

    # -- the protocol ---------------------------------------------------------------------
    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                self._log.seek(0)
                log = self._log.read().decode(errors="replace")
                raise RuntimeError(f"Chromium closed its protocol pipe (exit {self._process.poll()}): {log[-800:]}")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method: str, session: bool = False, **params) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self._session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            answer = self._read_message(deadline)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            self._events.append(answer)

    def _wait_event(self, method: str) -> None:
        deadline = time.monotonic() + self.timeout
        while True:
            while self._events:
                if self._events.pop(0).get("method") == method:
                    return
            self._events.append(self._read_message(deadline))

    # -- what tests use -------------------------------------------------------------------
    def open(self, url: str) -> None:
        """Navigate and return once the page's load event fired (its images are then loaded)."""
        self._events.clear()
        self.call("Page.navigate", session=True, url=url)
        self._wait_event("Page.loadEventFired")

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", session=True, format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        for fd in (self._to_browser, self._from_browser):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._log.close()
        self._profile.cleanup()

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
