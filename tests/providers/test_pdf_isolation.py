"""The PDF printer treats its page as hostile (docs/suppliers.md): raw markup fed straight
to it, past the templates' escaping, runs no script, reaches no server (a local one the
test starts) and shows no local file (one the test writes), with every layer and with
the DevTools tab alone; a stalled renderer is killed at the deadline; a normal order
still prints."""

from __future__ import annotations

import io
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psutil
import pypdf
import pytest

from herald.settings import Settings
from providers.chromium_pipe import print_html
from providers.pdf import PdfRenderError, chromium_binary, html_to_pdf, render_order_pdf
from tests.support.purchasing.documents import line, order
from tests.support.waiting import wait_for


def pdf_text(data: bytes) -> str:
    return "\n".join(page.extract_text() for page in pypdf.PdfReader(io.BytesIO(data)).pages)


@pytest.fixture
def server() -> Iterator[tuple[str, list[str]]]:
    """A local HTTP server on 127.0.0.1: its base URL and the paths it was asked for."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            body = b"SERVED-TEXT"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", asked
    httpd.shutdown()
    httpd.server_close()


def hostile_page(base: str, local: str) -> str:
    """Markup no template would let through: scripts, fetches, frames and a refresh."""
    return f"""<!DOCTYPE html><html><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src * 'unsafe-inline' data:">
<link rel="stylesheet" href="{base}/style.css"></head>
<body onload="document.body.append('HANDLER-RAN')">
<p>Purchase order PO-7 for Central Kitchen</p>
<p id="out"></p>
<script>document.getElementById('out').textContent = 'SCRIPT-RAN';
fetch('{base}/fetch'); new Image().src = '{base}/beacon';</script>
<img src="{base}/img.png"><iframe src="{base}/frame"></iframe>
<iframe src="javascript:'FRAME-SCRIPT-RAN'"></iframe>
<iframe src="{local}"></iframe><object data="{local}"></object><embed src="{local}">
<div style="background:url('{base}/bg.png')">styled</div>
<meta http-equiv="refresh" content="0;url={local}">
</body></html>"""


@pytest.fixture
def local_file(tmp_path: Path) -> tuple[str, str]:
    """A local file's ``file://`` URL and the unique text in it."""
    secret = tmp_path / "secret.txt"
    marker = f"LOCAL-FILE-{uuid.uuid4().hex[:8]}"
    secret.write_text(marker)
    return secret.as_uri(), marker


def assert_only_the_page_printed(data: bytes, asked: list[str], marker: str) -> None:
    text = pdf_text(data)
    assert "Purchase order PO-7 for Central Kitchen" in text
    for trace in ("SCRIPT-RAN", "HANDLER-RAN", "FRAME-SCRIPT-RAN", "SERVED-TEXT", marker):
        assert trace not in text
    assert asked == []


def test_raw_markup_runs_no_script_fetches_nothing_and_reads_no_local_file(
        server: tuple[str, list[str]], local_file: tuple[str, str]) -> None:
    base, asked = server
    local, marker = local_file

    data = html_to_pdf(hostile_page(base, local), settings=Settings())

    assert_only_the_page_printed(data, asked, marker)


def test_the_pipe_alone_runs_no_script_fetches_nothing_and_reads_no_local_file(
        server: tuple[str, list[str]], local_file: tuple[str, str], tmp_path: Path) -> None:
    # Given neither the page's policy nor Chromium's resolver rules: the tab alone
    base, asked = server
    local, marker = local_file
    bare = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]

    data = print_html(chromium_binary(Settings()), bare, hostile_page(base, local),
                      tmp_path, 60)

    assert_only_the_page_printed(data, asked, marker)


def test_a_refresh_to_a_local_server_is_never_followed(server: tuple[str, list[str]]) -> None:
    base, asked = server
    raw = (f'<!DOCTYPE html><meta http-equiv="refresh" content="0;url={base}/refresh">'
           "<p>Order PO-8</p>")

    text = pdf_text(html_to_pdf(raw, settings=Settings()))

    assert "Order PO-8" in text and "SERVED-TEXT" not in text
    assert asked == []


def test_even_a_page_past_the_policy_reaches_no_server(
        server: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the policy left out: only Chromium's own flags stand between page and network
    import providers.pdf

    monkeypatch.setattr(providers.pdf, "isolated_page", lambda html: html)
    base, asked = server
    raw = (f'<!DOCTYPE html><link rel="stylesheet" href="{base}/style.css">'
           f'<p>Order PO-9</p><img src="{base}/img.png"><iframe src="{base}/frame"></iframe>'
           f'<img src="http://localhost:{base.rsplit(":", 1)[1]}/by-name.png">')

    text = pdf_text(html_to_pdf(raw, settings=Settings()))

    assert "Order PO-9" in text and "SERVED-TEXT" not in text
    assert asked == []


def test_a_renderer_that_never_answers_is_killed_at_the_deadline(tmp_path: Path) -> None:
    # a "browser" that never speaks, with a helper process of its own
    stall = tmp_path / "chromium"
    stall.write_text("#!/bin/sh\nsleep 31.4159 &\nsleep 31.4159\n")
    stall.chmod(0o755)
    started = time.monotonic()

    with pytest.raises(PdfRenderError, match="did not finish within 1 s"):
        html_to_pdf("<p>x</p>", settings=Settings(chromium_path=str(stall)), timeout_s=1)

    assert time.monotonic() - started < 10
    wait_for(lambda: not [p for p in psutil.process_iter(["cmdline"])
                          if p.info["cmdline"] == ["sleep", "31.4159"]],
             timeout=5, what="the renderer's processes to be gone")


def test_a_normal_order_still_prints_its_styled_content() -> None:
    document = order(*(line(n) for n in range(1, 4)))

    text = pdf_text(render_order_pdf(document, "Central Kitchen", settings=Settings()))

    assert "Purchase order PO-1042" in text
    assert "For Central Kitchen, from Lucille Downtown" in text
    for number in range(1, 4):
        assert f"CO-{7000 + number}" in text
