"""``herald up``: the Procfile's processes in one terminal, under the supervisor of
:mod:`herald.supervisor`."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from herald.commands.shared import USAGE_ERROR, fail
from herald.supervisor import ReleaseFailed, StopSignals, process_environments, run_processes

if TYPE_CHECKING:
    from herald.settings import Settings


def cmd_up(args: argparse.Namespace, settings: Settings) -> int:
    """``herald up``: the release process first, then the others, in one terminal.

    On the embedded default ``herald up`` owns the embedded Redis when it finds none
    running: it starts it before the processes (they share it) and stops it after they
    all ended, unless another process still uses it. A SIGTERM/SIGINT at any moment ends
    it that way. Exit code: 0 when every process it ran exited 0,
    a stop signal included; otherwise the first failing process's code, or honcho's
    128 + signal when a stop signal came and a process did not exit 0.
    """
    from honcho.environ import parse_procfile

    procfile_path = Path(args.procfile)
    if not procfile_path.is_file():
        return fail(f"no Procfile at {procfile_path.resolve()} (use --procfile)", USAGE_ERROR)
    processes: dict[str, str] = dict(parse_procfile(procfile_path.read_text()).processes)
    if args.names:
        unknown = [name for name in args.names if name not in processes]
        if unknown:
            return fail(f"not in {procfile_path}: {', '.join(unknown)}", USAGE_ERROR)
        processes = {name: processes[name] for name in args.names}
    environments = process_environments(list(processes), settings)
    cwd = os.getcwd()  # where the embedded default's .herald/ and herald.db live
    stops = StopSignals()
    if settings.embedded_redis:
        from herald.embedded_redis import start_embedded_redis

        # before the processes, which share it; main() stops it after them
        start_embedded_redis()
    try:
        return run_processes(processes, environments, cwd, stops)
    except ReleaseFailed as failed:
        return fail(str(failed), failed.returncode)
