"""The fenced blocks of README.md and docs/*.md, read from the files at test time and run as a user
would run them (tests/test_docs_blocks.py): the docs cannot drift from what is tested.

Every fenced block names its language: `sh` (commands: run by bash), `python` (run as a module
file), or `text`, `json`, `yaml` (diagrams, output, config: not run; json and yaml are parsed).
A block that cannot run here has, on the line just before its fence,

    <!-- docs-test: not-run: REASON -->

(invisible on GitHub); each of its commands is then checked against `ray-otel-events SUBCOMMAND
--help` and `ray SUBCOMMAND --help` (the subcommand, its choice of resource, every flag) and `make`
targets against the Makefile; a not-run Python block must compile and import. Every hook string
(`ray_otel_events.x.y:attr`) in any block must resolve.

A story is a run of blocks with nothing but blank lines between them; each story runs in a session
of its own (what it starts in the background and its Ray cluster are stopped at its end), and the
stories of one file share that file's HOME (the default store), in order, as a user going down the
page. Exported variables carry from one block of a story to the next.

What a block gets in place of what it says, and nothing else:
- ports: a number after `127.0.0.1:`, `localhost:` or `0.0.0.0:`, or after a flag ending in `port`
  (`--port 8265`, `--grpc-port=4317`), becomes a free port: the same number the same port across
  a file, so parallel tests never collide;
- `/tmp/spans` (the local hook's default folder) becomes a folder of the file's own, and
  RAY_OTEL_EVENTS_SPANS_DIR names it;
- `ray` is a shim first on PATH: `ray start --head ...` gets `--port=GCS --node-ip-address=127.0.0.1
  --ray-client-server-port=P --dashboard-host=127.0.0.1 --dashboard-port=D --num-cpus=1
  --dashboard-agent-listen-port=0 --temp-dir=$TMPDIR/ray --disable-usage-stats` appended
  (tests/helpers/ray_cluster.py's ports; D is the block's own `--dashboard-port`, else what the
  file's blocks turn Ray's default 8265 into, so a block that gives 8265 to another server
  collides with Ray's dashboard as it would for a user; one CPU starts one worker ahead rather
  than one per core); `ray stop` stops that
  cluster's processes only (by its temp dir); any other `ray ...` is Ray's CLI as installed,
  imported once and forked per call (tests/helpers/ray_cli_server.py: the same arguments,
  environment, working directory and streams; a few seconds saved a call);
- `my_driver.py` is tests/fixtures/docs/my_driver.py, a small Ray driver (tasks, one failing on
  purpose, an actor, prints);
- the placeholders TASK_ID (a FAILED task, else any), JOB_ID, WORKER_ID and PID (its job's, and
  those of the worker that ran it), ACTOR_ID, NODE_IP and a session name (`session_2026-...`)
  become the ids of what the file's default store holds when the command runs (waited for, with
  a deadline);
- the environment is a fresh shell's: HOME the file's own, TMPDIR the story's (hence the OTLP
  hook's spool, and the default Ray temp dir where a driver finds the cluster `ray start` wrote),
  no RAY_*, OTEL_* or RAY_OTEL_EVENTS_* variable of the test run's (Ray's CLI lets RAY_ADDRESS
  override `--address`), but for one: RAY_OTEL_EVENTS_SHUTDOWN_FLUSH_TIMEOUT_SECONDS=2
  (`SHUTDOWN_FLUSH_S`; 10 by default). A server whose export target the docs place elsewhere (the
  bridge's Collector and `--export-addr` in "Three ways to see Ray") retries until then at SIGTERM
  and then counts what it holds as dropped, as it would for a user; the story waited 10 s on it.

A command ending in `&` runs in the background, its output to a file; the block waits for its
ready line (`listening ...`), and at the story's end, after the story's Ray cluster is stopped,
it gets SIGTERM and must exit 0. Every other command must exit 0 within a deadline and print no
traceback; where the docs say what a command prints (EXPECTED_OUTPUT), it is run again until its
output says so, within a deadline (events reach the store a moment after a driver ends).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from helpers.agg_procs import free_port
from helpers.ray_cluster import pids_of, ray_bin, stop_cluster

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = ("README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))
LANGUAGES = {"sh", "python", "text", "json", "yaml"}
DRIVER = ROOT / "tests" / "fixtures" / "docs" / "my_driver.py"

_FENCE = re.compile(r"^(```+)\s*([\w-]*)\s*$")
_MARKER = re.compile(r"^<!--\s*docs-test:\s*not-run:\s*(.+?)\s*-->\s*$")
_HOOK = re.compile(r"\bray_otel_events(?:\.\w+)+:\w+(?:\.\w+)*")
_PORT = re.compile(r"(?:(?<=127\.0\.0\.1:)|(?<=localhost:)|(?<=0\.0\.0\.0:)|(?<=port[ =]))([1-9]\d{1,4})\b")
_SESSION = re.compile(r"\bsession_\d{4}-\d\d-\d\d_[\d_-]+\d")
PLACEHOLDERS = ("TASK_ID", "ACTOR_ID", "JOB_ID", "NODE_IP", "WORKER_ID", "PID")
_PLACEHOLDER = re.compile(r"\b(" + "|".join(PLACEHOLDERS) + r")\b")

# What the docs say a command prints: (command pattern, output pattern: POSIX ERE, grep -E's). Only
# the promise, not the table's exact shape.
EXPECTED_OUTPUT: tuple[tuple[str, str], ...] = (
    (r"^ray-otel-events spans\b", r"^trace 0x[0-9a-f]{32} "),
    (r"^ray-otel-events sessions\b", r"session_[0-9]{4}-"),
    (r"^ray list tasks.*state=FAILED", r"FAILED"),
    (r"^ray-otel-events list tasks.*state=FAILED", r"FAILED"),
    (r"^ray summary tasks\b", r"Tasks Summary"),
    (r"list_tasks\(", r"TaskState\("),
    (r"^ray job list\b", r"JobDetails|submission_id"),
    (r"^ray job status 01000000\b", r"Job '01000000' succeeded"),
    # A log line of my_driver.py's: the FAILED task (TASK_ID) prints one before it raises.
    (r"^ray logs task\b", r"fail: about to raise"),
    (r"^ray-otel-events logs\b", r"fail: about to raise"),
    (r"^ray logs worker\b", r"fail: about to raise"),
    # The files kept, or, when there is one, its lines (as Ray's `ray logs cluster` answers).
    (r"^ray logs cluster\b", r"worker-[0-9a-f]+-|fail: about to raise"),
)

# The servers' bound on draining at SIGTERM (see the module's docstring): each still exits 0 with its
# summary, what it could not send counted as dropped.
SHUTDOWN_FLUSH_S = "2"
READY = re.compile(r"(?m)^listening \S+=")
COMMAND_TIMEOUT_S = 240.0
READY_TIMEOUT_S = 90.0
OUTPUT_DEADLINE_S = 60.0


@dataclass
class Block:
    path: str  # relative to the repository
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    not_run: str | None  # the marker's reason
    follows_previous: bool  # only blank lines since the previous block: the same story

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def blocks(path: str) -> list[Block]:
    lines = (ROOT / path).read_text().splitlines()
    found: list[Block] = []
    last_end = -10
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence = m.group(1)
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == fence), len(lines))
        marker = _MARKER.match(lines[i - 1]) if i else None
        start = i - 1 if marker else i
        gap = lines[last_end + 1 : start] if last_end >= 0 else ["x"]
        found.append(
            Block(
                path,
                i + 1,
                m.group(2),
                "\n".join(lines[i + 1 : end]) + "\n",
                marker.group(1) if marker else None,
                all(not g.strip() for g in gap),
            )
        )
        last_end = end
        i = end + 1
    return found


def all_blocks() -> list[Block]:
    return [b for path in DOC_FILES for b in blocks(path)]


def stories(path: str) -> list[list[Block]]:
    """The file's runnable blocks grouped into stories (see the module's docstring)."""
    grouped: list[list[Block]] = []
    previous_ran = False
    for block in blocks(path):
        runs = block.lang in ("sh", "python") and block.not_run is None
        if runs and grouped and block.follows_previous and previous_ran:
            grouped[-1].append(block)
        elif runs:
            grouped.append([block])
        previous_ran = runs
    return grouped


def _normal(command: str) -> str:
    return " ".join(shlex.split(command, comments=True))


def covering(story: list[Block]) -> Block | None:
    """The first block of a story, in any doc file, that runs every command of this one (the same
    words, comments aside) and more or as many, when this story holds no Python block; a story so
    covered is not run twice (README.md and docs/ repeat a recipe where each is read)."""
    if any(b.lang != "sh" for b in story):
        return None
    mine = {_normal(c) for b in story for c in commands(b.text)}
    for path in DOC_FILES:
        for other in stories(path):
            if other == story or any(b.lang != "sh" for b in other):
                continue
            theirs = {_normal(c) for b in other for c in commands(b.text)}
            if mine <= theirs and (
                len(theirs) > len(mine) or (other[0].path, other[0].line) < (story[0].path, story[0].line)
            ):
                return other[0]
    return None


def commands(text: str) -> list[str]:
    """A shell block's commands: continuation lines joined, comment lines and blank lines dropped."""
    out: list[str] = []
    pending = ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append((pending + line).strip())
        pending = ""
    if pending:
        out.append(pending.strip())
    return out


def words(command: str) -> list[str]:
    """The command's words with leading VAR=value assignments, `[`/`]` of optional parts and a
    trailing `&` left out."""
    tokens = [t.strip("[]") for t in shlex.split(command, comments=True)]
    tokens = [t for t in tokens if t and t not in ("&", "...")]
    while tokens and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", tokens[0]):
        tokens.pop(0)
    return tokens


# ---------------------------------------------------------------------------------------------------
# Blocks that cannot run: every command and flag checked against --help


def _ours_help(args: list[str]) -> tuple[int, str]:
    from ray_otel_events import cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = cli.main([*args, "--help"])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue()


def _path_and_flags(tokens: list[str]) -> tuple[list[str], list[str]]:
    path = []
    for token in tokens:
        if token.startswith("-"):
            break
        path.append(token)
    return path, [t.split("=", 1)[0] for t in tokens if t.startswith("--")]


def _flag_problems(what: str, help_text: str, flags: list[str]) -> list[str]:
    return [
        f"{what}: {flag} is not in its --help"
        for flag in flags
        if not re.search(re.escape(flag) + r"\b", help_text)
    ]


def help_problems(marked: list[Block]) -> list[str]:
    """Each command of the marked blocks against the --help of what it runs."""
    problems: list[str] = []
    targets = set(re.findall(r"(?m)^([\w-]+):", (ROOT / "Makefile").read_text()))
    script_help: dict[str, subprocess.CompletedProcess[str]] = {}  # a script asked once
    for block in marked:
        if block.lang == "python":
            problems += _python_problems(block)
            continue
        if block.lang != "sh":
            continue
        for command in commands(block.text):
            tokens = words(command)
            if not tokens:
                continue
            what = f"{block.where}: {command}"
            program = tokens[0]
            path, flags = _path_and_flags(tokens[1:])
            if program == "ray-otel-events":
                from ray_otel_events.cli import SUBCOMMANDS

                if not path or path[0] not in SUBCOMMANDS:
                    problems.append(f"{what}: no subcommand {path[:1]}")
                    continue
                code, text = _ours_help(path[:1])
                if code != 0:
                    problems.append(f"{what}: --help exited {code}")
                    continue
                choices = re.search(r"(?m)^positional arguments:\n  \{([\w,-]+)\}", text)
                if choices and len(path) > 1 and path[1] not in choices.group(1).split(","):
                    problems.append(f"{what}: {path[1]} is not one of {{{choices.group(1)}}}")
                problems += _flag_problems(what, text, flags)
            elif program == "ray":
                found = _ray_command(path[:2])
                if found is None:
                    problems.append(f"{what}: `ray {' '.join(path[:2])}` is not a command of Ray's CLI")
                    continue
                help_text, hidden = found
                problems += _flag_problems(what, help_text, [f for f in flags if f not in hidden])
            elif program == "make":
                problems += [
                    f"{what}: no Makefile target {t}" for t in path if "=" not in t and t not in targets
                ]
            elif program.endswith("python") and path[:1] and path[0].endswith(".py"):
                script = ROOT / path[0]
                if not script.is_file():
                    problems.append(f"{what}: no script {path[0]}")
                    continue
                if path[0] not in script_help:
                    script_help[path[0]] = subprocess.run(
                        [sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=120
                    )
                answer = script_help[path[0]]
                if answer.returncode != 0:
                    problems.append(f"{what}: `{path[0]} --help` exited {answer.returncode}")
                problems += _flag_problems(what, answer.stdout, flags)
    return problems


def _ray_command(path: list[str]) -> tuple[str, set[str]] | None:
    """What `ray PATH --help` prints, and the options it takes but leaves out of it (click's
    `hidden=True`, such as `ray start --tracing-startup-hook`); None when PATH names a subcommand
    Ray's CLI lacks. Read from Ray's click commands in this process (it imports them anyway for
    the hidden options): a `ray` interpreter of its own took seconds to start, for the same text."""
    import click
    from ray.scripts.scripts import cli

    command: click.Command = cli
    context = click.Context(cli, info_name="ray")
    for name in path:
        if not isinstance(command, click.Group):
            break  # the rest are the command's arguments (`ray list tasks`)
        sub = command.commands.get(name)
        if sub is None:
            return None
        command = sub
        context = click.Context(command, info_name=name, parent=context)
    hidden = {
        opt
        for param in command.params
        if isinstance(param, click.Option) and param.hidden
        for opt in param.opts
    }
    return command.get_help(context), hidden


def _python_problems(block: Block) -> list[str]:
    try:
        tree = compile(block.text, block.where, "exec", flags=0x400, dont_inherit=True)  # PyCF_ONLY_AST
    except SyntaxError as exc:
        return [f"{block.where}: {exc}"]
    import ast

    problems = []
    assert isinstance(tree, ast.Module)
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            code = compile(ast.Module([node], []), block.where, "exec")
            try:
                exec(code, {})
            except Exception as exc:
                problems.append(f"{block.where}: {ast.unparse(node)}: {exc!r}")
    return problems


def hook_problems(every: list[Block]) -> list[str]:
    from ray_otel_events.tracing.hooks import load_hook

    problems = []
    for block in every:
        for hook in sorted(set(_HOOK.findall(block.text))):
            try:
                load_hook(hook)
            except Exception as exc:
                problems.append(f"{block.where}: {hook}: {exc}")
    return problems


# ---------------------------------------------------------------------------------------------------
# Blocks that run

_PRELUDE = r"""
docs_ready() {  # PID LOG: wait for the server's ready line
    local deadline=$(( $(date +%s) + __READY__ ))
    until grep -qE '^listening [^ ]+=' "$2"; do
        if ! kill -0 "$1" 2>/dev/null; then
            echo "::docs: background command exited before its ready line::"; cat "$2"; exit 97
        fi
        if [ "$(date +%s)" -ge "$deadline" ]; then
            echo "::docs: no ready line in __READY__ s::"; cat "$2"; exit 97
        fi
        sleep 0.1
    done
}
docs_until() {  # REGEX: run the command read from stdin until its output matches, within a deadline
    local cmd out rc deadline=$(( $(date +%s) + __DEADLINE__ ))
    cmd=$(cat)
    while :; do
        out=$(eval "$cmd" 2>&1); rc=$?
        if [ $rc -eq 0 ] && printf '%s' "$out" | grep -qE -- "$1"; then
            printf '%s\n' "$out"; return 0
        fi
        if [ "$(date +%s)" -ge "$deadline" ]; then
            printf '%s\n' "$out"; echo "::docs: exit $rc, output never matched $1::"; return 98
        fi
        sleep 0.5
    done
}
"""


@dataclass
class Outcome:
    block: Block
    code: int
    output: str


@dataclass
class FileRun:
    """One Markdown file's stories, in order, sharing the file's HOME, ports and spans folder."""

    path: str
    root: Path = field(init=False)
    ports: dict[str, str] = field(default_factory=dict)
    background: dict[str, str] = field(default_factory=dict)  # name -> the command, as run

    def __post_init__(self) -> None:
        # Short: Ray puts unix sockets in the temp dirs under it.
        self.root = Path(tempfile.mkdtemp(prefix="dk", dir="/tmp"))
        for sub in ("home", "spans", "bin", "work", "rc"):
            (self.root / sub).mkdir()
        shutil.copy(DRIVER, self.root / "work" / "my_driver.py")
        self._write_shims()

    def close(self) -> None:
        """Ends the Ray CLI servers; anything else of the file's still running is a leak, named."""
        left = [_cmdline(pid) for pid in pids_of(str(self.root))]
        stop_cluster(str(self.root))
        shutil.rmtree(self.root, ignore_errors=True)
        leaked = [cmd for cmd in left if cmd.strip() and "ray_cli_server.py serve" not in cmd]
        assert not leaked, f"processes of {self.path}'s blocks outlived them: {leaked}"

    def _write_shims(self) -> None:
        bindir = self.root / "bin"
        tests = ROOT / "tests"
        (bindir / "ray").write_text(
            f"""#!/bin/sh
# The docs' `ray` (tests/helpers/doc_blocks.py): own ports and temp dir for `ray start --head`,
# `ray stop` for this story's cluster only; anything else is Ray's CLI.
if [ "$1" = start ]; then
    # Ray's dashboard port: the block's own (substituted), else Ray's default 8265 as the file's
    # blocks substitute it, so a block that gives 8265 to something else collides as for a user.
    dashboard_port="$DOCS_PORT_8265"
    prev=
    for a in "$@"; do
        case "$a" in --dashboard-port=*) dashboard_port="${{a#*=}}" ;; esac
        [ "$prev" = --dashboard-port ] && dashboard_port="$a"
        prev="$a"
    done
    for a in "$@"; do
        if [ "$a" = --head ]; then
            exec {ray_bin()} "$@" --port="$DOCS_GCS_PORT" --node-ip-address=127.0.0.1 \\
                --ray-client-server-port="$DOCS_CLIENT_PORT" --dashboard-host=127.0.0.1 \\
                --dashboard-port="$dashboard_port" --num-cpus=1 --dashboard-agent-listen-port=0 \\
                --temp-dir="$DOCS_RAY_TEMP_DIR" --disable-usage-stats
        fi
    done
fi
if [ "$1" = stop ]; then
    # The temp dir through the environment: stop_cluster ends what names it in its command line.
    exec {sys.executable} -c 'import os, sys; sys.path.insert(0, sys.argv[1])
from helpers.ray_cluster import stop_cluster
stop_cluster(os.environ["DOCS_RAY_TEMP_DIR"])
print("stopped the Ray cluster of this story")' "{tests}"
fi
exec {sys.executable} {tests / "helpers" / "ray_cli_server.py"} call "$@"
"""
        )
        (bindir / "docs-placeholder").write_text(
            f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(tests)!r})\n"
            "from helpers.doc_blocks import placeholder_main\nsys.exit(placeholder_main(sys.argv[1]))\n"
        )
        for shim in bindir.iterdir():
            shim.chmod(0o755)

    def substitute(self, text: str) -> str:
        def port(m: re.Match[str]) -> str:
            return self.ports.setdefault(m.group(1), str(free_port()))

        text = _PORT.sub(port, text)
        text = text.replace("/tmp/spans", str(self.root / "spans"))
        return "\n".join(_placeholders(line) for line in text.split("\n"))

    def env(self, story_dir: Path) -> dict[str, str]:
        kept = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("RAY_", "OTEL_", "PYTHON")) and k not in ("HOME", "TMPDIR", "VIRTUAL_ENV")
        }
        if "RAY_OTEL_EVENTS_PURE_PYTHON" in os.environ:  # `make test-pure`'s choice holds for the docs too
            kept["RAY_OTEL_EVENTS_PURE_PYTHON"] = os.environ["RAY_OTEL_EVENTS_PURE_PYTHON"]
        return {
            **kept,
            "PATH": f"{self.root / 'bin'}:{Path(sys.executable).parent}:{kept.get('PATH', '/usr/bin:/bin')}",
            "HOME": str(self.root / "home"),
            "TMPDIR": str(story_dir / "tmp"),
            "RAY_OTEL_EVENTS_SPANS_DIR": str(self.root / "spans"),
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_OTEL_EVENTS_SHUTDOWN_FLUSH_TIMEOUT_SECONDS": SHUTDOWN_FLUSH_S,
            "DOCS_GCS_PORT": str(free_port()),
            "DOCS_CLIENT_PORT": str(free_port()),
            "DOCS_RAY_TEMP_DIR": str(story_dir / "tmp" / "ray"),
            "DOCS_STORY_DIR": str(story_dir),
            "DOCS_RAY_CLI_DIR": str(self.root / "rc"),
            "DOCS_PORT_8265": self.ports.setdefault("8265", str(free_port())),
        }

    def run_story(self, story: list[Block]) -> list[str]:
        """Run a story's blocks in one session; the problems found, each naming its block."""
        story_dir = Path(tempfile.mkdtemp(prefix="s", dir=self.root))
        (story_dir / "tmp").mkdir()
        env = self.env(story_dir)
        problems: list[str] = []
        scripts: list[tuple[Block, subprocess.Popen[bytes], Path]] = []
        try:
            for n, block in enumerate(story):
                script, log = self._script(block, story_dir, n)
                proc = subprocess.Popen(
                    ["bash", str(script)],
                    cwd=self.root / "work",
                    env=env,
                    stdout=log.open("wb"),
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
                scripts.append((block, proc, log))
                done = _wait_for(partial(_block_done, proc, log), COMMAND_TIMEOUT_S * 2)
                output = log.read_text(errors="replace")
                if "::docs-block-done::" not in output:
                    problems.append(_failure(block, proc.poll(), output, "" if done else "timed out"))
                    break
                problems += _traceback(block, output)
        finally:
            stop_cluster(str(story_dir / "tmp"))  # the cluster, and the OTLP hook's forwarder
            problems += self._stop_background(story_dir, scripts)
        return problems

    def _stop_background(
        self, story_dir: Path, scripts: list[tuple[Block, subprocess.Popen[bytes], Path]]
    ) -> list[str]:
        problems = []
        pids_file = story_dir / "bg.pids"
        started = [line.split() for line in pids_file.read_text().splitlines()] if pids_file.exists() else []
        for pid, _ in reversed(started):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGTERM)
        for block, proc, _ in scripts:
            try:
                proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                problems.append(f"{block.where}: a background command did not exit within 90 s of SIGTERM")
        for _, name in started:
            rc_file = story_dir / f"{name}.rc"
            # Written by the block's subshell once the command exited (the script may be gone).
            _wait_for(partial(_written, rc_file), 90.0)
            output = (story_dir / f"{name}.log").read_text(errors="replace")
            rc = rc_file.read_text().strip() if rc_file.exists() else "none within 90 s"
            block = next(b for b, _, _ in scripts if name.startswith(f"bg{b.line}-"))
            if rc != "0":
                problems.append(
                    f"{block.where}: background command exited {rc} after SIGTERM:\n{output[-3000:]}"
                )
            ours = re.match(r"ray-otel-events (\w+)", " ".join(words(self.background[name])))
            if ours and not re.search(rf"(?m)^{ours.group(1)} summary$|^stats {{", output):
                # Every server of ours prints its summary (or `stats {json}`) as it exits.
                problems.append(f"{block.where}: no `{ours.group(1)} summary` at exit:\n{output[-3000:]}")
            problems += _traceback(block, output)
        return problems

    def _script(self, block: Block, story_dir: Path, n: int) -> tuple[Path, Path]:
        exports = story_dir / "exports.sh"
        parts = [
            _PRELUDE.replace("__READY__", str(int(READY_TIMEOUT_S))).replace(
                "__DEADLINE__", str(int(OUTPUT_DEADLINE_S))
            ),
            f"[ -f {exports} ] && . {exports}",
        ]
        if block.lang == "python":
            module = story_dir / f"block_{block.line}.py"
            module.write_text(self.substitute(block.text))
            parts.append(_step(1, f"python {module}", None))
        else:
            for i, command in enumerate(commands(self.substitute(block.text)), 1):
                if re.search(r"(?<!&)&\s*(#.*)?$", command):
                    name = f"bg{block.line}-{i}"
                    self.background[name] = command
                    body = re.sub(r"&\s*(#.*)?$", "", command)
                    log, rc = story_dir / f"{name}.log", story_dir / f"{name}.rc"
                    parts.append(_head(i, command))
                    # The subshell records the command's exit code once SIGTERM ended it.
                    pids = story_dir / "bg.pids"
                    record = f'echo "$p {name}" >> {pids}; wait $p; echo $? > {rc}'
                    parts.append(f"( {body} > {log} 2>&1 & p=$!; {record} ) &")
                    parts.append(
                        f"until grep -q ' {name}$' {story_dir}/bg.pids 2>/dev/null; do sleep 0.05; done"
                    )
                    parts.append(
                        f"docs_ready \"$(grep ' {name}$' {story_dir}/bg.pids | cut -d' ' -f1)\" {log}"
                    )
                else:
                    expected = next((out for cmd, out in EXPECTED_OUTPUT if re.search(cmd, command)), None)
                    parts.append(_step(i, command, expected))
        parts.append(f"export -p > {exports}")
        parts.append("echo ::docs-block-done::")
        parts.append("wait")
        script = story_dir / f"block_{block.line}.sh"
        script.write_text("\n".join(parts) + "\n")
        return script, story_dir / f"block_{block.line}.log"


def _placeholders(line: str) -> str:
    """Placeholders become `$(docs-placeholder NAME)`, looked up when the command runs (inside
    single quotes: the quotes closed around it)."""

    def lookup(name: str, m: re.Match[str]) -> str:
        call = f"$(docs-placeholder {name})"
        return f"'\"{call}\"'" if line[: m.start()].count("'") % 2 else call

    line = _SESSION.sub(lambda m: lookup("SESSION", m), line)
    return _PLACEHOLDER.sub(lambda m: lookup(m.group(1), m), line)


def _head(i: int, command: str) -> str:
    return f"printf '\\n::docs-cmd {i} at %s: %s::\\n' \"$(date +%T)\" {shlex.quote(command)}"


def _step(i: int, command: str, expected: str | None) -> str:
    head = _head(i, command)
    if expected is None:
        run = (
            f"timeout {int(COMMAND_TIMEOUT_S)} bash -c {shlex.quote(command)}"
            if "export " not in command and "eval " not in command
            else command
        )
    else:
        run = f"docs_until {shlex.quote(expected)} <<'__DOCS_CMD__'\n{command}\n__DOCS_CMD__"
    return f'{head}\n{run}\nrc=$?; if [ $rc -ne 0 ]; then echo "::docs-failed {i} exit $rc::"; exit $rc; fi'


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""  # gone


def _block_done(proc: subprocess.Popen[bytes], log: Path) -> bool:
    return "::docs-block-done::" in log.read_text(errors="replace") or proc.poll() is not None


def _written(path: Path) -> bool:
    return path.exists() and path.read_text().strip() != ""


def _wait_for(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


def _failure(block: Block, code: int | None, output: str, why: str) -> str:
    return f"{block.where}: block failed (exit {code}{', ' + why if why else ''}):\n{output[-4000:]}"


# A traceback printed (not one inside stored data), or a line logged at ERROR, Ray's (`DATE TIME\tERROR
# services.py:1500 -- Failed to bind to 127.0.0.1:8265 ...`) or ours (`DATE TIME ERROR module: ...`):
# a block that works prints neither.
_TROUBLE = re.compile(r"(?m)^Traceback \(most recent call last\):|^\d{4}-\d\d-\d\d \S+\s+ERROR .*")


def _traceback(block: Block, output: str) -> list[str]:
    found = _TROUBLE.search(output)
    if found:
        return [f"{block.where}: {found.group(0)!r} in the output:\n{output[-4000:]}"]
    return []


# ---------------------------------------------------------------------------------------------------
# Placeholders: ids of what the file's store holds (bin/docs-placeholder)


def placeholder_main(name: str) -> int:
    """Print the value of one placeholder, from the default store, waiting (within
    OUTPUT_DEADLINE_S) until the store holds one; the same value for the rest of the story."""
    cache = Path(os.environ["DOCS_STORY_DIR"]) / "placeholders.json"
    known = json.loads(cache.read_text()) if cache.exists() else {}
    deadline = time.monotonic() + OUTPUT_DEADLINE_S
    while True:
        value = known.get(name) or _placeholder(name)
        if value:
            cache.write_text(json.dumps({**known, name: value}))
            print(value)
            return 0
        if time.monotonic() > deadline:
            print(f"docs-placeholder: the store holds no value for {name}", file=sys.stderr)
            return 1
        time.sleep(0.2)  # a read of the store file, in this process


def _ours(*args: str) -> list[dict[str, object]]:
    """`ray-otel-events ARGS --format json` on the default store, in this process."""
    from ray_otel_events import cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            code = cli.main([*args, "--format", "json"])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    rows = json.loads(out.getvalue() or "[]") if code == 0 else []
    return rows if isinstance(rows, list) else []


def _listed(resource: str) -> list[dict[str, object]]:
    return _ours("list", resource, "--limit", "1000")


def _placeholder(name: str) -> str | None:
    if name == "SESSION":
        sessions = _ours("sessions")
        return str(sessions[0]["name"]) if sessions else None
    if name == "TASK_ID":
        task = _chosen_task()
        return str(task["task_id"]) if task else None
    if name == "ACTOR_ID":
        actors = _listed("actors")
        return str(actors[0]["actor_id"]) if actors else None
    if name == "NODE_IP":
        nodes = _listed("nodes")
        return str(nodes[0]["node_ip"]) if nodes else None
    # JOB_ID, WORKER_ID and PID: TASK_ID's job, and the worker that ran it (its lines are its file's).
    task = _chosen_task()
    if task is None or not task.get("worker_id"):
        return None
    if name == "JOB_ID":
        return str(task["job_id"])
    if name == "WORKER_ID":
        return str(task["worker_id"])
    # The worker's pid as GCS reports it when the worker registers (its row), as `ray logs` names
    # worker files by it. A task's own pid comes only in the executing worker's RUNNING event (the
    # owner's FINISHED carries workerPid 0, captured in tests/fixtures/ray-2.60/
    # TASK_LIFECYCLE_EVENT.json), which Ray flushes on that worker's timer and drops when its call
    # to the aggregator fails: a loaded CI machine stored a FAILED task without it for a minute.
    worker = next((w for w in _listed("workers") if w.get("worker_id") == task["worker_id"]), {})
    value = worker.get("pid") or task.get("worker_pid")
    return str(value) if value else None


def _chosen_task() -> dict[str, object] | None:
    tasks = [t for t in _listed("tasks") if t.get("type") == "NORMAL_TASK"]
    failed = [t for t in tasks if t.get("state") == "FAILED"]
    return (failed or tasks or [None])[0]


@contextlib.contextmanager
def file_run(path: str) -> Iterator[FileRun]:
    run = FileRun(path)
    try:
        yield run
    finally:
        run.close()
