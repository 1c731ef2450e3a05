"""``python -m examples.standalone.clock``: fire the application's schedules until
SIGTERM/SIGINT (as many clocks as you like: each tick fires once)."""

from __future__ import annotations

from examples.standalone.app import app
from herald.queue import fire_schedules, stop_on_signal

if __name__ == "__main__":
    try:
        fire_schedules(stop_on_signal())
    finally:
        app.close()
