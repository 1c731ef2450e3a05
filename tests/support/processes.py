"""herald processes for tests that need real ones (crashes, restarts, a clock)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: The repository's root: where a herald process runs, so ``--import tests.…`` resolves.
REPO = Path(__file__).resolve().parents[2]


def spawn_herald(*args: str) -> subprocess.Popen[bytes]:
    """``herald ARGS…`` in a process of its own with the test's environment (its database,
    Redis and queue prefix), any free health port, errors-only logging, output discarded."""
    env = {**os.environ, "WORKER_PORT": "0", "LOG_LEVEL": "ERROR"}
    return subprocess.Popen([sys.executable, "-m", "herald.cli", *args], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
