"""For each hook string on the command line, build a TracedProcessPoolExecutor; print what happened.

Prints one JSON object per line: {"hook", "error": class name or null, "message"}.
"""

from __future__ import annotations

import json
import sys

from ray_otel_events.executor import TracedProcessPoolExecutor
from ray_otel_events.tracing import HookError

for hook in sys.argv[1:]:
    try:
        with TracedProcessPoolExecutor(1, tracing_startup_hook=hook) as pool:
            assert pool.submit(sum, [1, 2]).result() == 3
        print(json.dumps({"hook": hook, "error": None, "message": ""}))
    except HookError as exc:
        print(json.dumps({"hook": hook, "error": type(exc).__name__, "message": str(exc)}))
