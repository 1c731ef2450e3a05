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


def test_timestamps_are_utc_milliseconds_across_a_change_of_second() -> None:
    # Given text logging, and records stamped within one second and then the next ones
    out = io.StringIO()
    configure_logging(Settings(log_format="text", log_level="INFO"), stream=out)
    logger = logging.getLogger("herald.test")
    moments = (1_796_400_000.0, 1_796_400_000.999, 1_796_400_001.25, 1_796_486_400.5)
    for moment in moments:
        record = logger.makeRecord("herald.test", logging.INFO, __file__, 1, "at", (), None)
        record.created = moment
        logger.handle(record)

    # Then each line starts with its own second and millisecond, in UTC
    stamps = [line.split(" ", 1)[0] for line in out.getvalue().splitlines()]
    assert stamps == ["2026-12-04T16:00:00.000Z", "2026-12-04T16:00:00.999Z",
                      "2026-12-04T16:00:01.250Z", "2026-12-05T16:00:00.500Z"]


def test_text_values_are_quoted_only_when_they_hold_a_space_quote_or_equals() -> None:
    out = io.StringIO()
    configure_logging(Settings(log_format="text", log_level="INFO"), stream=out)

    logging.getLogger("herald.test").info("values", extra={
        "plain": "job-1", "spaced": "a b", "tabbed": "a\tb", "nbsp": "a\u00a0b",
        "quoted": 'say "hi"', "equals": "k=v", "empty": "", "count": 3, "none": None,
        "listed": ["x", "é"]})

    pairs = out.getvalue().splitlines()[0].split(": values ", 1)[1]
    assert pairs == ('plain=job-1 spaced="a b" tabbed="a\\tb" nbsp="a\u00a0b" '
                     'quoted="say \\"hi\\"" equals="k=v" empty="" count=3 none=null '
                     'listed="[\\"x\\", \\"é\\"]"')
