"""Log lines: JSON objects or readable text, both carrying the ``extra=`` fields."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from herald.logs import configure_logging
from herald.settings import Settings


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    quiet = {name: logging.getLogger(name).level for name in ("pika", "urllib3", "httpx")}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, previous in quiet.items():
        logging.getLogger(name).setLevel(previous)
    logging.captureWarnings(False)


def emit_sample(logger: logging.Logger) -> None:
    logger.debug("not shown at INFO")
    logger.info("delivery sent", extra={"queue": "notification-email", "job_id": "job-1",
                                        "outcome": "sent", "dedup_id": "dispatch:o1:initial",
                                        "actor": "system"})
    try:
        raise ValueError("provider said no\nsecond line")
    except ValueError:
        logger.exception("send failed", extra={"job_id": "job-2", "attempt": 3})


def test_json_format_writes_one_parseable_object_per_line() -> None:
    # Given JSON logging at INFO
    out = io.StringIO()
    configure_logging(Settings(log_format="json", log_level="INFO"), stream=out)

    # When records with extra fields and an exception are logged
    emit_sample(logging.getLogger("herald.test"))

    # Then each record is one line holding one JSON object with every field
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    sent, failed = (json.loads(line) for line in lines)
    assert sent["msg"] == "delivery sent"
    assert (sent["level"], sent["logger"]) == ("INFO", "herald.test")
    assert sent["ts"].endswith("Z")
    assert {key: sent[key] for key in ("queue", "job_id", "outcome", "dedup_id", "actor")} == {
        "queue": "notification-email", "job_id": "job-1", "outcome": "sent",
        "dedup_id": "dispatch:o1:initial", "actor": "system"}
    assert (failed["level"], failed["job_id"], failed["attempt"]) == ("ERROR", "job-2", 3)
    assert "ValueError: provider said no" in failed["exc"]


def test_text_format_appends_extra_fields_as_key_value() -> None:
    out = io.StringIO()
    configure_logging(Settings(log_format="text", log_level="INFO"), stream=out)

    logging.getLogger("herald.test").info(
        "delivery sent", extra={"queue": "notification-email", "job_id": "job-1",
                                "reason": "opted out"})

    line = out.getvalue().splitlines()[0]
    assert "INFO" in line and "herald.test: delivery sent" in line
    assert line.endswith('queue=notification-email job_id=job-1 reason="opted out"')


def test_configuring_twice_writes_each_record_once_in_the_latest_format() -> None:
    first, second = io.StringIO(), io.StringIO()
    configure_logging(Settings(log_format="text"), stream=first)
    configure_logging(Settings(log_format="json"), stream=second)

    logging.getLogger("herald.test").warning("once", extra={"job_id": "j"})

    assert first.getvalue() == ""
    assert [json.loads(line)["msg"] for line in second.getvalue().splitlines()] == ["once"]


def test_noisy_libraries_are_held_at_warning() -> None:
    configure_logging(Settings(log_format="text", log_level="DEBUG"), stream=io.StringIO())

    for name in ("pika", "urllib3", "httpx"):
        assert logging.getLogger(name).getEffectiveLevel() == logging.WARNING
    assert logging.getLogger("herald").getEffectiveLevel() == logging.DEBUG
