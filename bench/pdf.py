"""Render time and memory of a supplier order PDF: headless Chromium against WeasyPrint.

``python -m bench.pdf [--lines 30] [--renders 5]``. Both renderers print the same HTML
(``providers.pdf.render_order_html`` of an order with ``--lines`` lines). Each renderer
runs in a fresh Python process of its own, so one's memory never counts against the
other's: the first render (cold: Chromium's start, WeasyPrint's import and font set-up),
then ``--renders`` more, whose median is the steady cost. Memory is what the worker would
carry: for Chromium the peak of the summed PSS (proportional set size: shared pages
counted once) of its process tree during a render (sampled every 5 ms), plus the Python
process's growth; for WeasyPrint the Python process's peak RSS minus its RSS before the
import. WeasyPrint is measured only when it
is importable (``pip install weasyprint``; it needs the system's Pango). Appends the
results to ``bench/results.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from datetime import datetime
from decimal import Decimal

from bench import publish

RENDERERS = ("chromium", "weasyprint")


def sample_document(lines: int):  # type: ignore[no-untyped-def]
    """An order of ``lines`` lines with every field filled."""
    from providers.suppliers import DocumentLine, PurchaseOrderDocument

    return PurchaseOrderDocument(
        order_id="bench-order", dispatch_id="bench-dispatch", order_number="PO-20261204-0042",
        restaurant_id="bench-restaurant", restaurant_name="Lucille Downtown",
        restaurant_location="12 Main Street, Springfield", placed_by_email="chef@lucille.test",
        delivery_notes="Back door, before 7 am. Ring twice.",
        lines=tuple(DocumentLine(
            line_item_id=f"line-{i}", catalog_item_id=f"item-{i}",
            name=f"Catalog item number {i}, long enough to wrap a little",
            supplier_sku=f"CK-{10000 + i}", supplier_product_code=f"{880000 + i}",
            quantity=Decimal(i % 7 + 1), unit="case", unit_size="12 x 1 lb")
            for i in range(1, lines + 1)))


def _rss_mb() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


class _TreeSampler:
    """The peak summed PSS of this process's descendants while it runs."""

    def __init__(self) -> None:
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._stop.is_set():
            total = 0
            for child in me.children(recursive=True):
                try:
                    # PSS: pages the Chromium processes share are counted once in the sum
                    total += child.memory_full_info().pss
                except psutil.Error:
                    continue
            self.peak_mb = max(self.peak_mb, total / 2**20)
            time.sleep(0.005)


def measure(renderer: str, lines: int, renders: int) -> dict[str, object]:
    """Run in the child process: time and memory of 1 + ``renders`` renders."""
    from providers.pdf import html_to_pdf, render_order_html

    html = render_order_html(sample_document(lines), "Central Kitchen")
    before_mb = _rss_mb()
    started = time.perf_counter()
    if renderer == "weasyprint":
        import weasyprint

        def render() -> bytes:
            return weasyprint.HTML(string=html).write_pdf()
    else:
        def render() -> bytes:
            return html_to_pdf(html)

    times, tree_peak, size = [], 0.0, 0
    for index in range(1 + renders):
        with _TreeSampler() as sampler:
            began = started if index == 0 else time.perf_counter()  # cold: with the import
            data = render()
            times.append(time.perf_counter() - began)
        tree_peak = max(tree_peak, sampler.peak_mb)
        size = len(data)
    return {"renderer": renderer, "cold_s": times[0], "warm_s": statistics.median(times[1:]),
            "python_growth_mb": _peak_mb() - before_mb, "tree_peak_mb": tree_peak,
            "pdf_bytes": size, "python_rss_after_mb": _rss_mb()}


def _child(renderer: str, lines: int, renders: int) -> dict[str, object] | str:
    command = [sys.executable, "-m", "bench.pdf", "--child", renderer, "--lines", str(lines),
               "--renders", str(renders)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or ["failed"])[-1]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _versions() -> dict[str, str]:
    versions = {}
    chromium = subprocess.run(["chromium", "--version"], capture_output=True, text=True,
                              check=False)
    versions["chromium"] = chromium.stdout.strip() or "not installed"
    try:
        import weasyprint

        versions["weasyprint"] = f"WeasyPrint {weasyprint.__version__}"
    except ImportError:
        versions["weasyprint"] = "not installed"
    return versions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=30)
    parser.add_argument("--renders", type=int, default=5)
    parser.add_argument("--child", choices=RENDERERS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.lines, args.renders)))
        return
    versions = _versions()
    lines = [f"bench.pdf: an order of {args.lines} lines, first render then median of "
             f"{args.renders}, {os.cpu_count()} cores, "
             f"{datetime.now().strftime('%Y-%m-%d %H:%M')}.", "",
             "| renderer | first render, s | median render, s | peak memory of the "
             "render, MB | worker (Python) growth, MB | PDF bytes |",
             "|---|---|---|---|---|---|"]
    for renderer in RENDERERS:
        result = _child(renderer, args.lines, args.renders)
        if isinstance(result, str):
            lines.append(f"| {versions[renderer]} | — | — | — | — | {result[:80]} |")
            continue
        peak = (result["tree_peak_mb"] if renderer == "chromium"
                else result["python_growth_mb"])
        lines.append(f"| {versions[renderer]} | {result['cold_s']:.2f} | "
                     f"{result['warm_s']:.2f} | {peak:.0f} | "
                     f"{result['python_growth_mb']:.1f} | {result['pdf_bytes']:,} |")
    publish(["", *lines])


if __name__ == "__main__":
    main()
