"""Ray's CLI asked several questions in one interpreter, each as `ray ARGS...` would answer it: the
CLI takes over a second to start, and a state test asks it many read-only questions.

    python ray_cli_batch.py '[["list", "tasks", "--address", URL], ...]'

prints one JSON line: a list of {"args", "returncode", "stdout", "stderr"}, one per command, in order.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import traceback
from typing import Any

import click
from ray.scripts.scripts import cli


def run(args: list[str]) -> dict[str, Any]:
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            cli.main(args=args, prog_name="ray", standalone_mode=False)
        except click.ClickException as exc:
            exc.show()
            code = exc.exit_code
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        except Exception:
            traceback.print_exc()
            code = 1
    return {"args": args, "returncode": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


if __name__ == "__main__":
    answers = [run(args) for args in json.loads(sys.argv[1])]
    print(json.dumps(answers))
