"""A worker's templates are compiled once per host: the next start of a worker (a
restart, another process) loads them compiled, and a temporary directory it cannot use
only means compiling again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: Compiles every template the renderer's environment lists, as a notification worker's
#: start does, and prints how many it had to compile (not load) and one rendered line.
COMPILE_ALL = """
from actors.render import environment
env = environment()
compiled = []
original = env.compile
def counting(*args, **kwargs):
    compiled.append(args[1] if len(args) > 1 else kwargs.get("name"))
    return original(*args, **kwargs)
env.compile = counting
names = env.list_templates(filter_func=lambda name: name.startswith("notifications/"))
for name in names:
    env.get_template(name)
print(len(names), len(compiled))
print(env.get_template("notifications/account.welcome/en/sms.txt").render(
    data={}, account={"locale": "en"}).splitlines()[0])
"""


def _start(tmpdir: Path) -> tuple[int, int, str]:
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    result = subprocess.run([sys.executable, "-c", COMPILE_ALL], env=env, capture_output=True,
                            text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    counts, line = result.stdout.splitlines()[:2]
    listed, compiled = map(int, counts.split())
    return listed, compiled, line


def test_the_second_start_on_a_host_compiles_no_template(tmp_path: Path) -> None:
    # When a worker starts on a host for the first time, it compiles every template
    listed, compiled, first = _start(tmp_path)
    assert listed > 0 and compiled >= listed
    # Then the next start loads them all compiled, and renders the same
    assert _start(tmp_path)[1:] == (0, first)


def test_a_temporary_directory_it_cannot_use_means_compiling_again(tmp_path: Path) -> None:
    # Given a temporary directory where the cache's place is taken (by a file)
    (tmp_path / f"_jinja2-cache-{os.getuid()}").write_text("")
    # Then each start compiles every template, and renders as ever
    for _ in range(2):
        listed, compiled, line = _start(tmp_path)
        assert compiled >= listed > 0 and line
