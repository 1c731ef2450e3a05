"""Print a page to PDF with headless Chromium driven over its DevTools pipe.

Chromium runs as a process of its own (a new session, so its whole process group can be
killed) with ``--remote-debugging-pipe``: it reads protocol commands on fd 3 and writes
answers on fd 4, each a JSON object ended by a NUL byte. The page never comes from a
file or a server: a new ``about:blank`` tab (an opaque origin, which may load no
``file://`` URL) gets script execution turned off, every request it would make failed
before it leaves the browser (``Fetch``), and only then the markup
(``Page.setDocumentContent``), which is printed with ``Page.printToPDF``. Why a process
per render: docs/suppliers.md.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import select
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: The protocol's fds in Chromium's process.
_COMMANDS_FD, _ANSWERS_FD = 3, 4
#: Seconds Chromium gets to exit after ``Browser.close`` before its group is killed.
CLOSE_GRACE_S = 5.0
#: How the page is printed: its own ``@page`` size and margins, backgrounds, no header.
PRINT_OPTIONS = {"printBackground": True, "preferCSSPageSize": True,
                 "displayHeaderFooter": False}


class PipeError(Exception):
    """Chromium exited, stalled past the deadline or refused a command."""


class TimedOut(PipeError):
    """The deadline passed before Chromium answered."""


def print_html(binary: str, flags: Sequence[str], html: str, workdir: Path,
               timeout_s: float) -> bytes:
    """``html`` printed to PDF by ``binary`` (with ``flags``, a profile under ``workdir``),
    no script run and no request sent; raises :class:`PipeError` (:class:`TimedOut` at
    the deadline). No Chromium process outlives the call."""
    deadline = time.monotonic() + timeout_s
    stderr = workdir / "chromium.log"
    browser = _Browser.start(binary, [*flags, f"--user-data-dir={workdir}/profile",
                                      "--remote-debugging-pipe", "about:blank"],
                             stderr, deadline)
    try:
        target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.call("Target.attachToTarget",
                               {"targetId": target, "flatten": True})["sessionId"]
        browser.call("Emulation.setScriptExecutionDisabled", {"value": True}, session)
        browser.call("Fetch.enable", {"patterns": [{"urlPattern": "*"}]}, session)
        frame = browser.call("Page.getFrameTree", {}, session)["frameTree"]["frame"]["id"]
        browser.call("Page.setDocumentContent", {"frameId": frame, "html": html}, session)
        printed = browser.call("Page.printToPDF", PRINT_OPTIONS, session)
        data = base64.b64decode(printed["data"])
        browser.close()
        return data
    except PipeError as error:
        last = stderr.read_text("utf-8", "replace").strip().splitlines()[-1:] if \
            stderr.exists() else []
        raise type(error)(f"{error}{': ' + last[0][:200] if last else ''}") from None
    finally:
        browser.kill()


class _Browser:
    """One Chromium process and the two ends of its protocol pipe."""

    def __init__(self, pid: int, commands: int, answers: int, deadline: float) -> None:
        self.pid, self._commands, self._answers, self._deadline = (
            pid, commands, answers, deadline)
        self._buffer = b""
        self._next_id = 0
        self._exited = False

    @classmethod
    def start(cls, binary: str, args: Sequence[str], stderr: Path,
              deadline: float) -> _Browser:
        commands_r, commands_w = os.pipe()
        answers_r, answers_w = os.pipe()
        # above the fds they are moved to, so the moves cannot overwrite each other
        child_r = fcntl.fcntl(commands_r, fcntl.F_DUPFD_CLOEXEC, 10)
        child_w = fcntl.fcntl(answers_w, fcntl.F_DUPFD_CLOEXEC, 10)
        for fd in (commands_r, answers_w):
            os.close(fd)
        try:
            pid = os.posix_spawn(binary, [binary, *args], os.environ, file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                (os.POSIX_SPAWN_OPEN, 2, str(stderr), os.O_WRONLY | os.O_CREAT, 0o600),
                (os.POSIX_SPAWN_DUP2, child_r, _COMMANDS_FD),
                (os.POSIX_SPAWN_DUP2, child_w, _ANSWERS_FD),
            ], setsid=True)
        except BaseException:
            for fd in (commands_w, answers_r):
                os.close(fd)
            raise
        finally:
            for fd in (child_r, child_w):
                os.close(fd)
        os.set_blocking(commands_w, False)
        return cls(pid, commands_w, answers_r, deadline)

    def call(self, method: str, params: dict[str, Any] | None = None,
             session: str | None = None) -> dict[str, Any]:
        """Send one command and return its result, failing every request the page makes
        meanwhile."""
        call_id = self._send(method, params, session)
        while True:
            message = self._receive()
            if message.get("id") == call_id:
                if "error" in message:
                    raise PipeError(f"{method}: {message['error'].get('message', '?')}")
                return dict(message.get("result", {}))
            self._answer(message)

    def wait_for(self, event: str, session: str | None) -> None:
        """Wait for ``event`` of ``session``, failing every request the page makes."""
        while True:
            message = self._receive()
            if message.get("method") == event and message.get("sessionId") == session:
                return
            self._answer(message)

    def _answer(self, message: dict[str, Any]) -> None:
        if message.get("method") == "Fetch.requestPaused":
            self._send("Fetch.failRequest", {
                "requestId": message["params"]["requestId"],
                "errorReason": "BlockedByClient"}, message.get("sessionId"))

    def close(self) -> None:
        """Ask Chromium to exit and wait a moment for it."""
        with contextlib.suppress(PipeError):
            self._send("Browser.close", None, None)
        until = min(self._deadline, time.monotonic() + CLOSE_GRACE_S)
        while time.monotonic() < until:
            if os.waitpid(self.pid, os.WNOHANG)[0]:
                self._exited = True
                return
            time.sleep(0.02)

    def kill(self) -> None:
        """Kill the process group (Chromium's helpers too), reap Chromium, close the pipe."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        if not self._exited:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            self._exited = True
        for fd in (self._commands, self._answers):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _send(self, method: str, params: dict[str, Any] | None, session: str | None) -> int:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method,
                                   "params": params or {}}
        if session:
            message["sessionId"] = session
        data = json.dumps(message).encode() + b"\0"
        while data:
            _, writable, _ = select.select([], [self._commands], [], self._left())
            if not writable:
                raise TimedOut("chromium did not read its commands in time")
            try:
                data = data[os.write(self._commands, data):]
            except BlockingIOError:
                continue
            except BrokenPipeError:
                raise PipeError(self._exited_how()) from None
        return self._next_id

    def _receive(self) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            readable, _, _ = select.select([self._answers], [], [], self._left())
            if not readable:
                raise TimedOut("chromium did not answer in time")
            chunk = os.read(self._answers, 1 << 20)
            if not chunk:
                raise PipeError(self._exited_how())
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return dict(json.loads(message))

    def _exited_how(self) -> str:
        """``chromium exited N`` once its exit status is in (a second at most)."""
        until = time.monotonic() + 1.0
        while time.monotonic() < until:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self._exited = True
                return f"chromium exited {os.waitstatus_to_exitcode(status)}"
            time.sleep(0.01)
        return "chromium closed its pipe"

    def _left(self) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimedOut("chromium did not finish in time")
        return left
