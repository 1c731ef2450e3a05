"""``herald demo``: herald's own demo, end to end (:mod:`herald.demo`)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from herald.commands.shared import console

if TYPE_CHECKING:
    from herald.settings import Settings


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    """``herald demo``: see :mod:`herald.demo`."""
    from herald import demo
    from herald.demo.database import Stopped
    from herald.demo.summary import WIDTH as DEMO_WIDTH

    jobs = demo.DEFAULT_JOBS if args.jobs is None else args.jobs
    out = console(DEMO_WIDTH)
    try:
        return demo.run(jobs, events=args.events, batch_size=args.batch_size,
                        failover_events=args.failover_events, orders=args.orders,
                        purchase_orders=args.purchase_orders,
                        digest_events=args.digest_events, console=out)
    except KeyboardInterrupt as stop:
        # the demo unwound (its rows removed, its Redis stopped): say so, not a traceback
        signal_name, code = ("SIGTERM", 143) if isinstance(stop, Stopped) else ("Ctrl-C", 130)
        out.print(f"[yellow]demo stopped ({signal_name})[/]")
        return code
