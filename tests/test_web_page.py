"""The page `serve` shows, in a real headless Chromium driven by Selenium.

The demo runs as `make demo` does (it keeps serving); the browser opens the address it prints and
checks what a user would: no console errors, the demo's tasks with their states, a filter that
narrows the table, a failed task's error and log lines, and a task posted after the page opened
appearing without a reload. Screenshots go to build/screenshots/. Chromium and chromedriver are
required (`make test` installs them): a missing browser fails the run.
"""

from __future__ import annotations

import base64
import datetime
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from helpers.agg_procs import check_ended_well
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

SCREENSHOTS = Path(__file__).resolve().parent.parent / "build" / "screenshots"
TASKS = 12  # simulate(n) fails for n % 7 == 3: inputs 3 and 10
ACTOR_CALLS = 10


def _wait(condition: Callable[[], Any], timeout_s: float = 15.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = condition()
        except StaleElementReferenceException:  # the page redrew what was found: look again
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def demo_process(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[subprocess.Popen[str], queue.Queue[str]]]:
    """`ray-otel-events demo` started, and its stdout's lines as they come; ended with Ctrl-C."""
    workdir = tmp_path_factory.mktemp("demo")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ray_otel_events", "demo", "--tasks", str(TASKS), "--workdir", str(workdir)],
        stdout=subprocess.PIPE,
        stderr=(workdir / "demo.stderr").open("w"),
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    stdout = proc.stdout
    threading.Thread(target=lambda: [lines.put(line) for line in stdout], daemon=True).start()
    try:
        yield proc, lines
    finally:
        proc.send_signal(signal.SIGINT)  # as Ctrl-C on `make demo`
        proc.wait(timeout=60)
        check_ended_well(proc, (workdir / "demo.stderr").read_text(), ended_by_test=False)


@pytest.fixture(scope="module")
def demo(demo_process: tuple[subprocess.Popen[str], queue.Queue[str]], browser: WebDriver) -> str:
    """The demo's page, left serving. Every test here takes the browser too: it starts while the
    demo runs its tasks (each takes seconds), not after."""
    _, lines = demo_process
    address = None
    deadline = time.monotonic() + 180
    while address is None and time.monotonic() < deadline:
        line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        if line.startswith("the page: "):
            address = line.split()[2].rstrip("/")
    assert address, "the demo never printed its page"
    return address


def headless_chromium(height: int) -> WebDriver:
    """Debian's chromium through chromedriver, headless, its console kept (a missing browser fails
    the test: it is installed by `make test`)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        pytest.fail("chromium and chromedriver are required for the page's tests: run `make test`")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size=1400,{height}"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return webdriver.Chrome(service=Service(driver), options=options)


@pytest.fixture(scope="module")
def browser() -> Iterator[WebDriver]:
    session = headless_chromium(1600)
    try:
        yield session
    finally:
        session.quit()


def _rows(browser: WebDriver) -> list[Any]:
    return browser.find_elements(By.CSS_SELECTOR, "#tasks-table tbody tr")


def _console_errors(browser: WebDriver) -> list[str]:
    return [entry["message"] for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]


def task_events(
    task_hex: str, job_hex: str, session: str, name: str, state: str, task_type: str = "NORMAL_TASK"
) -> list[dict[str, Any]]:
    """A task's definition and one state, stamped now, as Ray's aggregator POSTs them."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    task = base64.b64encode(bytes.fromhex(task_hex)).decode()
    job = base64.b64encode(bytes.fromhex(job_hex)).decode()
    common = {"sourceType": "CORE_WORKER", "timestamp": now, "severity": "INFO", "sessionName": session}
    return [
        {
            **common,
            "eventId": base64.b64encode(os.urandom(16)).decode(),
            "eventType": "TASK_DEFINITION_EVENT",
            "taskDefinitionEvent": {
                "taskId": task,
                "taskAttempt": 0,
                "taskType": task_type,
                "taskName": name,
                "taskFunc": {"pythonFunctionDescriptor": {"moduleName": "m", "functionName": name}},
                "jobId": job,
            },
        },
        {
            **common,
            "eventId": base64.b64encode(os.urandom(16)).decode(),
            "eventType": "TASK_LIFECYCLE_EVENT",
            "taskLifecycleEvent": {
                "taskId": task,
                "taskAttempt": 0,
                "jobId": job,
                "stateTransitions": [{"state": state, "timestamp": now}],
            },
        },
    ]


def test_the_page_shows_the_demo_and_follows_the_store(demo: str, browser: WebDriver) -> None:
    browser.get(demo + "/")
    _wait(lambda: len(_rows(browser)) == TASKS + ACTOR_CALLS, what="the demo's tasks in the table")
    browser.execute_script("window.__notReloaded = true")
    states = [row.get_attribute("data-state") for row in _rows(browser)]
    assert states.count("FAILED") == 2 and states.count("FINISHED") == TASKS + ACTOR_CALLS - 2
    jobs = browser.find_elements(By.CSS_SELECTOR, "#jobs-table tbody tr")
    assert len(jobs) == 1 and "SUCCEEDED" in jobs[0].text
    assert browser.find_elements(By.CSS_SELECTOR, "#timeline-chart .bar.state-failed")
    assert browser.find_elements(By.CSS_SELECTOR, "#trace-tree .span-row")
    browser.save_screenshot(str(SCREENSHOTS / "1-overview.png"))

    Select(browser.find_element(By.ID, "filter-state")).select_by_visible_text("FAILED")
    _wait(lambda: len(_rows(browser)) == 2, what="the state filter")
    assert {row.get_attribute("data-state") for row in _rows(browser)} == {"FAILED"}
    Select(browser.find_element(By.ID, "filter-state")).select_by_index(0)
    browser.find_element(By.ID, "filter-q").send_keys("Counter")
    _wait(lambda: len(_rows(browser)) == ACTOR_CALLS, what="the text filter")
    browser.save_screenshot(str(SCREENSHOTS / "2-filtered.png"))
    browser.find_element(By.ID, "filter-q").clear()
    browser.find_element(By.ID, "filter-q").send_keys(" ")  # clear() fires no input event
    _wait(lambda: len(_rows(browser)) == TASKS + ACTOR_CALLS, what="the filter cleared")

    header = browser.find_element(By.CSS_SELECTOR, "#tasks-table th[data-sort=duration]")
    header.click()
    _wait(lambda: header.get_attribute("data-order") == "desc", what="sorting by duration")
    header.click()
    _wait(lambda: header.get_attribute("data-order") == "asc", what="sorting by duration, ascending")

    failed = browser.find_element(By.CSS_SELECTOR, "#tasks-table tbody tr[data-state=FAILED] a.task-link")
    failed_id = failed.get_attribute("data-task-id")
    failed.click()
    _wait(
        lambda: "ValueError: demo failure for input" in browser.find_element(By.ID, "task-error").text,
        what="the failed task's error",
    )
    logs = _wait(lambda: browser.find_element(By.ID, "task-logs").text, what="log lines")
    assert "simulating input" in logs and "is unlucky" in logs
    assert browser.current_url.endswith(f"/task/{failed_id}")
    assert "FAILED" in browser.find_element(By.ID, "task-transitions").text
    assert browser.find_elements(By.CSS_SELECTOR, "#task-spans .span-row")
    browser.save_screenshot(str(SCREENSHOTS / "3-failed-task.png"))

    browser.find_element(By.ID, "back").click()
    _wait(lambda: len(_rows(browser)) == TASKS + ACTOR_CALLS, what="back to the table")
    job_hex = _wait(
        lambda: browser.find_element(By.CSS_SELECTOR, "#jobs-table tbody tr").get_attribute("data-job-id"),
        what="a job's id",
    )
    late = os.urandom(8).hex() + "ff" * 12 + job_hex
    session = requests.get(f"{demo}/api/sessions", timeout=10).json()["current"]  # the demo's
    posted = requests.post(
        f"{demo}/v1/ray-events",
        json=task_events(late, job_hex, session, "late_arrival", "RUNNING"),
        timeout=10,
    )
    assert posted.status_code == 200, posted.text
    _wait(
        lambda: browser.find_elements(By.CSS_SELECTOR, f"#tasks-table tbody tr[data-task-id='{late}']"),
        what="the task posted after the page opened",
    )
    assert browser.execute_script("return window.__notReloaded === true")  # no reload happened
    browser.save_screenshot(str(SCREENSHOTS / "4-live-update.png"))
    assert _console_errors(browser) == []


def test_a_reloaded_task_link_and_a_missing_task(demo: str, browser: WebDriver) -> None:
    """A task's address can be opened directly; an unknown one says so instead of failing."""
    failed = requests.get(f"{demo}/api/ui/tasks", params={"state": "FAILED"}, timeout=10).json()["rows"][0]
    browser.get(f"{demo}/task/{failed['task_id']}")
    _wait(lambda: "ValueError" in browser.find_element(By.ID, "task-error").text, what="the task page")
    browser.get(f"{demo}/task/{'ab' * 24}")
    _wait(
        lambda: "no task" in browser.find_element(By.ID, "live-status").text, what="the missing-task notice"
    )
    browser.save_screenshot(str(SCREENSHOTS / "5-missing-task.png"))
    assert requests.get(f"{demo}/static/../pyproject.toml", timeout=10).status_code == 404


def test_the_task_page_shows_the_fields_of_a_later_ray(demo: str, browser: WebDriver) -> None:
    """A later Ray's fields (one on the base event, one in the definition) are listed on the task's
    page, by their snake_case names, with their values as they came."""
    task_hex = os.urandom(8).hex() + "ff" * 12 + "01000000"
    session = requests.get(f"{demo}/api/sessions", timeout=10).json()["current"]  # the demo's
    events = task_events(task_hex, "01000000", session, "from_a_later_ray", "FINISHED")
    events[0]["sourceHostname"] = "node-7.example"
    events[0]["taskDefinitionEvent"]["laterRayField"] = {"shards": [1, 2]}
    assert requests.post(f"{demo}/v1/ray-events", json=events, timeout=10).status_code == 200
    browser.get_log("browser")  # read and so cleared: a test before this one may have left its 404
    browser.get(f"{demo}/task/{task_hex}")
    rows = _wait(
        lambda: [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#task-fields tbody tr")],
        what="the task's other fields",
    )
    assert sorted(rows) == ['0 later_ray_field {"shards":[1,2]}', '0 source_hostname "node-7.example"']
    assert browser.find_element(By.ID, "task-fields-section").is_displayed()
    browser.save_screenshot(str(SCREENSHOTS / "6-later-ray-fields.png"))
    assert _console_errors(browser) == []
