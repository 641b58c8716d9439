"""The compiled POST reader (native/_posted_events.c) built with UBSan, stopping at the first
undefined behaviour, on bodies whose nested objects, lists and strings are empty: empty buffers
are never copied from NULL."""

from __future__ import annotations

import copy
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import orjson
import pytest

from tests.test_otlp_wire import _fixture_dicts

SOURCE = Path(__file__).resolve().parents[1] / "src" / "ray_otel_events"


def _compiler() -> list[str] | None:
    command = shlex.split(sysconfig.get_config_var("CC") or "cc")
    return command if command and shutil.which(command[0]) else None


def _emptied(event: dict[str, object]) -> list[dict[str, object]]:
    """The event with each nested object emptied, each list made one empty object, in turn."""
    out = []
    for name, payload in event.items():
        if not isinstance(payload, dict):
            continue
        for key, value in payload.items():
            if isinstance(value, dict | list):
                changed = copy.deepcopy(event)
                changed[name][key] = {} if isinstance(value, dict) else [{}]  # type: ignore[index]
                out.append(changed)
            elif isinstance(value, str):
                changed = copy.deepcopy(event)
                changed[name][key] = ""  # type: ignore[index]
                out.append(changed)
    return out


@pytest.fixture(scope="module")
def sanitized(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the package whose _posted_events is built with UBSan."""
    compiler = _compiler()
    if compiler is None or not list((SOURCE / "native").glob("_posted_events.*.so")):
        pytest.skip("built without a C compiler")
    root = tmp_path_factory.mktemp("ubsan")
    package = root / "ray_otel_events"
    shutil.copytree(SOURCE, package, ignore=shutil.ignore_patterns("__pycache__", "_posted_events.*.so"))
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    command = [
        *compiler,
        "-shared",
        "-fPIC",
        "-O1",
        "-fsanitize=undefined",
        "-fno-sanitize-recover=all",
        f"-I{sysconfig.get_paths()['include']}",
        f"-I{package / 'native'}",
        str(package / "native" / "_posted_events.c"),
        "-o",
        str(package / "native" / f"_posted_events{suffix}"),
    ]
    built = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if built.returncode != 0 and "sanitize" in built.stderr:
        pytest.skip(f"the compiler has no UBSan: {built.stderr[:200]}")
    assert built.returncode == 0, built.stderr
    return root


def test_empty_nested_objects_in_a_post_are_read_without_undefined_behaviour(sanitized: Path) -> None:
    bodies = [orjson.dumps([changed]) for event in _fixture_dicts() for changed in _emptied(event)]
    assert len(bodies) > 20
    (sanitized / "bodies.json").write_bytes(orjson.dumps([body.decode() for body in bodies]))
    script = (
        "import orjson, sys\n"
        "from ray_otel_events.otel import posted_events\n"
        "assert posted_events._read is not None\n"
        "bodies = orjson.loads(open(sys.argv[1], 'rb').read())\n"
        "for body in bodies:\n"
        "    posted_events.read_posted_events(body.encode())\n"
        "    posted_events._read(body.encode())\n"
        "print('read', len(bodies))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(sanitized), "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1"}
    env.pop("RAY_OTEL_EVENTS_PURE_PYTHON", None)
    done = subprocess.run(
        [sys.executable, "-c", script, str(sanitized / "bodies.json")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0 and "runtime error" not in done.stderr, done.stderr[-3000:]
    assert done.stdout.split() == ["read", str(len(bodies))]
