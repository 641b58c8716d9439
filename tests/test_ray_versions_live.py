"""The live version matrix (`make test-ray-versions`): a head of each Ray release, from its own venv,
exports to one `serve`; that release's own `ray list` answers on the live cluster must be our store's
for its session, while the cluster runs and after it has stopped.

Skipped unless RAY_VERSIONS_VENVS names the folder of the releases' venvs (the Makefile's target
builds them there): each cluster takes a minute, too long for `make test`, which checks the same
against the recorded fixtures (tests/test_ray_versions.py).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator

import pytest
import requests
from helpers.agg_procs import CliServer
from helpers.ray_versions import (
    ACTOR_FIELDS,
    JOB_FIELDS,
    OWN_RELEASE,
    RELEASES,
    TASK_FIELDS,
    VENVS_VARIABLE,
    LiveAnswers,
    actor_tasks,
    live_release,
    ours,
    project,
    venvs_root,
)

pytestmark = pytest.mark.ray_versions
VENVS = venvs_root()
if VENVS is None:
    pytest.skip(
        f"the live version matrix runs with {VENVS_VARIABLE} set (make test-ray-versions)",
        allow_module_level=True,
    )

TASKS_ONLY = frozenset({"2.49.2"})  # Ray 2.49 exports task events only


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = CliServer("serve", "--store", str(tmp_path_factory.mktemp("matrix") / "events.sqlite3"))
    try:
        yield f"http://{server.address}"
    finally:
        server.close()


def _sessions(url: str) -> set[str]:
    return {row["name"] for row in requests.get(f"{url}/api/sessions", timeout=30).json()["sessions"]}


def _differences(release: str, live: LiveAnswers, store: LiveAnswers, tasks_only: bool) -> list[str]:
    found = []
    if project(store.tasks, TASK_FIELDS) != project(live.tasks, TASK_FIELDS):
        found.append(
            f"tasks: live {project(live.tasks, TASK_FIELDS)} ours {project(store.tasks, TASK_FIELDS)}"
        )
    if actor_tasks(store.tasks) != actor_tasks(live.tasks):
        found.append("actor tasks' actor ids")
    if tasks_only:
        if store.actors or store.jobs:
            found.append("actors or jobs from a release that sends none")
    else:
        if project(store.actors, ACTOR_FIELDS) != project(live.actors, ACTOR_FIELDS):
            found.append(f"actors: live {live.actors} ours {store.actors}")
        if project(store.jobs, JOB_FIELDS) != project(live.jobs, JOB_FIELDS):
            found.append(
                f"jobs: live {project(live.jobs, JOB_FIELDS)} ours {project(store.jobs, JOB_FIELDS)}"
            )
    return found


@pytest.mark.parametrize("release", RELEASES)
def test_a_live_release_and_our_store_list_the_same(serve: str, release: str) -> None:
    assert VENVS is not None
    if release != OWN_RELEASE and not (VENVS / release / "bin" / "ray").exists():
        pytest.fail(f"no venv of Ray {release} under {VENVS}: run `make test-ray-versions`")
    before = _sessions(serve)
    with live_release(release, VENVS, f"{serve}/v1/ray-events") as run:
        # A GCS that gave up on its agent (a loaded machine: helpers.ray_versions.GCS_GAVE_UP) sends
        # no actor, job or node: the store must then show none, and the tasks as the live cluster.
        tasks_only = release in TASKS_ONLY or run.gcs_gave_up()
        deadline = time.monotonic() + 120
        while True:  # the agent sends on its own schedule: wait for our store to have it all
            live = run.ask()
            new = _sessions(serve) - before
            store = ours(serve, next(iter(new))) if len(new) == 1 else None
            differences = (
                ["no session of its own yet"]
                if store is None
                else _differences(release, live, store, tasks_only)
            )
            if not differences:
                break
            assert time.monotonic() < deadline, f"Ray {release}: " + "; ".join(differences)
            time.sleep(1.0)
        session = next(iter(new))
    after = ours(serve, session)  # the cluster is gone: the store still answers the same
    assert not _differences(release, live, after, tasks_only)
    assert len(after.tasks) == 14
    if tasks_only and release not in TASKS_ONLY:
        warnings.warn(
            f"Ray {release}: its GCS gave up on its agent; actors and jobs not compared", stacklevel=1
        )
