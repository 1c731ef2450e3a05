"""A RabbitMQ node of a test's own whose broker the test stops and starts again, as an
operator's restart does: ``rabbitmqctl stop_app`` closes every client connection and the
listener, ``start_app`` opens them again on the same port; durable queues and persistent
messages (Dramatiq's) are kept on disk across it. The Erlang VM stays up, which saves the
~10 s a cold start of the node costs.

The node is a :func:`tests.support.services.start_rabbitmq` one; ``rabbitmqctl`` needs
the node's own environment (its node name, epmd port and Erlang cookie's home), which is
read from the node's process and run as its user.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import subprocess
from pathlib import Path
from typing import Any

import psutil

from tests.support.services import (
    Service,
    _amqp_version,
    rabbitmq_scripts_dir,
    server_in_tempdir,
    start_rabbitmq,
)
from tests.support.waiting import wait_for

#: Seconds rabbitmqctl may take for one command.
RABBITMQCTL_TIMEOUT_S = 60


class RestartableRabbitmq:
    """One RabbitMQ node: its ``url``; :meth:`stop` and :meth:`start` its broker."""

    def __init__(self, workdir: Path) -> None:
        self._service: Service = start_rabbitmq(workdir)
        self.url = self._service.url
        self.port = int(self.url.rsplit(":", 1)[1].split("/", 1)[0])
        self._env = self._node_environment()

    def _node_environment(self) -> dict[str, str]:
        """The environment of the node's Erlang VM (the one process started with this
        node's port)."""
        wanted = str(self.port)
        for process in psutil.process_iter(["name"]):
            with contextlib.suppress(psutil.Error):
                environ = process.environ()
                if (environ.get("RABBITMQ_NODE_PORT") == wanted
                        and "beam" in (process.info["name"] or "")):
                    return environ
        raise RuntimeError(f"no RabbitMQ node process with RABBITMQ_NODE_PORT={wanted}")

    def _rabbitmqctl(self, *args: str) -> None:
        scripts = rabbitmq_scripts_dir()
        assert scripts is not None
        run_as: dict[str, Any] = {}
        if os.geteuid() == 0:
            entry = pwd.getpwnam("rabbitmq")
            run_as = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
        subprocess.run([str(scripts / "rabbitmqctl"), *args], env=self._env, check=True,
                       timeout=RABBITMQCTL_TIMEOUT_S, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **run_as)

    def stop(self) -> None:
        """Stop the broker: every client connection is closed, the port refuses new ones."""
        self._rabbitmqctl("stop_app")

    def start(self) -> None:
        """Start the broker again; returns once it takes AMQP connections."""
        self._rabbitmqctl("start_app")
        wait_for(lambda: _amqp_version(self.port), timeout=30, every=0.1,
                 what="RabbitMQ to take connections")

    def close(self) -> None:
        """Stop the node for good."""
        self._service.stop()


def restartable_rabbitmq() -> contextlib.AbstractContextManager[RestartableRabbitmq]:
    """A :class:`RestartableRabbitmq` in a new temporary directory (one its service user can
    traverse), stopped for good and removed afterwards."""
    return server_in_tempdir("herald-rabbit-restart-", RestartableRabbitmq)
