"""A Ray driver for the OTLP hook's delivery tests; prints JSON lines.

python otlp_spool_driver.py burst HOOK TEMP_DIR N   # own cluster: N no-op tasks, tasks on
    # max_calls=1 workers, an actor killed after its calls, tasks that print and log (one failing),
    # then ray.shutdown() at once
python otlp_spool_driver.py stream                  # the `ray start` cluster RAY_ADDRESS names:
    # no-op tasks in rounds of 20 until the cluster goes away (the test ends the driver then),
    # printing each round's total
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys

import ray

# A round waits this long: the first one starts the workers, each importing the hook, which takes
# seconds on a machine busy with other clusters (10 s was once too short in CI).
ROUND_SECONDS = 120


@ray.remote
def noop() -> None:
    return None


@ray.remote(max_calls=1)
def once() -> int:
    return os.getpid()  # the worker exits after this call


@ray.remote
def chatty(i: int) -> str:
    print(f"chatty {i} to stdout")
    print(f"chatty {i} to stderr", file=sys.stderr)
    logging.getLogger("user.chatty").warning("chatty %d logged", i)
    return str(ray.get_runtime_context().get_task_id())


@ray.remote(max_retries=0)
def fail() -> None:
    print("fail: about to raise")
    raise ValueError("failing on purpose")


@ray.remote
class Counter:
    def __init__(self) -> None:
        self.n = 0

    def add(self) -> int:
        self.n += 1
        return self.n


def burst(hook: str, temp_dir: str, n: int) -> None:
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        logging_level="ERROR",
        _tracing_startup_hook=hook,
        _temp_dir=temp_dir,
        log_to_driver=False,  # this driver's stdout is its JSON summary
    )
    ray.get([noop.remote() for _ in range(n)])
    pids = ray.get([once.remote() for _ in range(3)])
    counter = Counter.remote()
    last = ray.get([counter.add.remote() for _ in range(3)])[-1]
    ray.kill(counter)
    # last, right before the shutdown: what a task printed must not wait in its worker's memory
    chatty_ids = ray.get([chatty.remote(i) for i in range(3)])
    with contextlib.suppress(ray.exceptions.RayTaskError):
        ray.get(fail.remote())
    summary = {"noop": n, "once_pids": pids, "actor_calls": last, "chatty": chatty_ids}
    print(json.dumps(summary), flush=True)
    ray.shutdown()  # at once: Ray ends every worker without exit hooks


def stream() -> None:
    ray.init(logging_level="ERROR")
    done = 0
    while True:
        refs = [noop.remote() for _ in range(20)]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=ROUND_SECONDS)
        if len(ready) < len(refs):
            # Said on stderr, which the test shows: the cluster went away, or its workers were slow.
            print(f"stream: {len(ready)} of {len(refs)} tasks done in {ROUND_SECONDS} s", file=sys.stderr)
            sys.exit(1)
        ray.get(ready)
        done += len(ready)
        print(json.dumps({"done": done}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "burst":
        burst(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        stream()
