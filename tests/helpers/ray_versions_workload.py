"""The small deterministic workload every Ray release of the version matrix runs (with that
release's own Python, so it imports only `ray`): plain tasks, a failing task, a task retried until
it gives up, nested tasks, actors (one whose constructor fails). Prints `done` when every result
is in."""

from __future__ import annotations

import ray


@ray.remote
def square(x: int) -> int:
    return x * x


@ray.remote
def boom() -> None:
    raise ValueError("version matrix failure")


@ray.remote(max_retries=1, retry_exceptions=True)
def flaky() -> None:
    raise RuntimeError("fails every attempt")


@ray.remote
def parent(n: int) -> int:
    return sum(ray.get([square.remote(i) for i in range(n)]))


@ray.remote
class Counter:
    def __init__(self) -> None:
        self.total = 0

    def add(self, x: int) -> int:
        self.total += x
        return self.total


@ray.remote
class Broken:
    def __init__(self) -> None:
        raise ValueError("constructor fails")

    def ping(self) -> str:
        return "pong"


def main() -> None:
    ray.init()
    assert ray.get([square.remote(i) for i in range(3)]) == [0, 1, 4]
    assert ray.get(parent.remote(2)) == 1
    for failing in (boom, flaky):
        try:
            ray.get(failing.remote())
            raise AssertionError(f"{failing} did not fail")
        except ray.exceptions.RayTaskError:
            pass
    counter = Counter.options(name="counter").remote()
    assert ray.get([counter.add.remote(1), counter.add.remote(2)]) == [1, 3]
    broken = Broken.remote()
    try:
        ray.get(broken.ping.remote())
        raise AssertionError("Broken answered")
    except ray.exceptions.RayActorError:
        pass
    print("done")


if __name__ == "__main__":
    main()
