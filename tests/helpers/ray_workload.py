"""The start of the driver the live-Ray tests run (the bridge, `ray-env`, the dashboard tests):
tasks, one of them failing, and an actor class. Each test adds what only it needs."""

from __future__ import annotations


def tasks_and_actor_class(failure: str, actor: str = "Acc") -> str:
    """A driver's source: `ray.init()` (RAY_ADDRESS names the test's cluster), three `ok` tasks and
    `boom` raising `ValueError(failure)`, run; the actor class `actor` (an `add` method) defined,
    none created."""
    return f"""
import ray
ray.init()

@ray.remote
def ok(x):
    return x

@ray.remote
def boom():
    raise ValueError({failure!r})

@ray.remote
class {actor}:
    def add(self, x):
        return x

assert ray.get([ok.remote(i) for i in range(3)]) == [0, 1, 2]
try:
    ray.get(boom.remote())
except ray.exceptions.RayTaskError:
    pass
"""
