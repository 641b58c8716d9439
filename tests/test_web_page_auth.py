"""Our page in headless Chromium against a `serve` that wants Ray's token, over Ray-shaped tasks.

The page loads without a token, finds its data refused, and shows a sign-in form; the token is
traded for Ray's HttpOnly cookie (`/api/authenticate`), and the page then shows the tasks with
nothing more sent by hand. Actor creation tasks and drivers' tasks, whose ids start with the same
all-f unique part, are shown by what tells them apart (the actor id, the job id), not as
`ffffffffffffffff`. Screenshots go to build/screenshots/.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import requests
from helpers.agg_procs import CliServer, start
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from test_web_page import SCREENSHOTS, _console_errors, _wait, browser, task_events  # noqa: F401 (a fixture)

TOKEN = "page-token-0123456789"
JOB = "01000000"


def _finished(task_hex: str, task_type: str, name: str) -> list[dict[str, Any]]:
    return task_events(task_hex, JOB, "page", name, "FINISHED", task_type)


def test_page_signs_in_with_rays_cookie_and_tells_actor_and_driver_tasks_apart(
    servers: list[CliServer],
    tmp_path: Path,
    browser: WebDriver,  # noqa: F811
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token_file), "HOME": str(tmp_path)}
    serve = start(servers, "serve", "--store", str(tmp_path / "s.sqlite3"), env=env)
    base = f"http://{serve.address}"
    actors = ["a1b2c3d4e5f60718293a4b5c" + JOB, "0f1e2d3c4b5a69788796a5b4" + JOB]
    events = [
        *_finished("ff" * 8 + actors[0], "ACTOR_CREATION_TASK", "Counter.__init__"),
        *_finished("ff" * 8 + actors[1], "ACTOR_CREATION_TASK", "Counter.__init__"),
        *_finished("ff" * 20 + JOB, "DRIVER_TASK", "driver"),
        *_finished("1234567890abcdef" + "ff" * 12 + JOB, "NORMAL_TASK", "plain"),
    ]
    posted = requests.post(f"{base}/v1/ray-events", json=events, timeout=10)  # Ray's aggregator's way
    assert posted.status_code == 200, posted.text

    browser.delete_all_cookies()
    browser.get(base + "/")
    sign_in = browser.find_element(By.ID, "sign-in")
    _wait(sign_in.is_displayed, what="the sign-in form once the data is refused")
    browser.find_element(By.ID, "sign-in-token").send_keys("not-the-token")
    browser.find_element(By.CSS_SELECTOR, "#sign-in button").click()
    _wait(lambda: "refused" in browser.find_element(By.ID, "live-status").text, what="a refused token said")
    time.sleep(2.5)  # the page asks for news each second, still without a token: the refusal stays said
    assert "the token was refused" in browser.find_element(By.ID, "live-status").text
    browser.save_screenshot(str(SCREENSHOTS / "page-auth-sign-in.png"))
    browser.find_element(By.ID, "sign-in-token").send_keys(TOKEN)
    browser.find_element(By.CSS_SELECTOR, "#sign-in button").click()

    def labels() -> dict[str, str]:
        links = browser.find_elements(By.CSS_SELECTOR, "#tasks-table tbody a.task-link")
        return {link.get_attribute("data-task-id") or "": link.text.split(" #")[0] for link in links}

    shown = _wait(lambda: labels() if len(labels()) == 4 else None, what="the four tasks after signing in")
    _wait(lambda: not sign_in.is_displayed(), what="the sign-in form gone")
    assert browser.get_cookie("ray-authentication-token")["httpOnly"] is True  # type: ignore[index]
    assert shown["ff" * 8 + actors[0]] == f"actor {actors[0][:16]}"
    assert shown["ff" * 8 + actors[1]] == f"actor {actors[1][:16]}"
    assert shown["ff" * 20 + JOB] == f"driver {JOB}"
    assert shown["1234567890abcdef" + "ff" * 12 + JOB] == "1234567890abcdef"
    assert len(set(shown.values())) == 4 and not any(v.startswith("ffffffffffffffff") for v in shown.values())
    browser.save_screenshot(str(SCREENSHOTS / "page-auth-tasks.png"))
    refused = [e for e in _console_errors(browser) if "401" not in e and "403" not in e]
    assert refused == [], refused  # only the refusals before signing in
