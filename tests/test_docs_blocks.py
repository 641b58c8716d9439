"""The docs are executed: every fenced block of README.md and docs/*.md, read from the files now,
is run (sh and python, with a live Ray 2.60 cluster where a block starts one) or, marked
`<!-- docs-test: not-run: REASON -->`, checked against the --help of what it runs.
How a block is run, and what it gets in place of fixed ports and ids: tests/helpers/doc_blocks.py."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml
from helpers import doc_blocks


def test_every_block_names_a_language_the_runner_knows() -> None:
    unknown = [
        f"{b.where}: ```{b.lang}" for b in doc_blocks.all_blocks() if b.lang not in doc_blocks.LANGUAGES
    ]
    assert not unknown, "tag each block sh, python (run), or text, json, yaml (not commands):\n" + "\n".join(
        unknown
    )


def test_marked_blocks_are_commands_and_say_why() -> None:
    wrong = [
        b.where
        for b in doc_blocks.all_blocks()
        if b.not_run is not None and (b.lang not in ("sh", "python") or len(b.not_run) < 10)
    ]
    assert not wrong, "a not-run marker belongs before a sh or python block, with its reason"


def test_data_blocks_parse() -> None:
    for block in doc_blocks.all_blocks():
        if block.lang == "yaml":
            assert yaml.safe_load(block.text) is not None, block.where
        if block.lang == "json":  # one or more values, each its own paragraph
            for part in block.text.split("\n\n"):
                if part.strip():
                    json.loads(part)


def test_blocks_that_cannot_run_match_the_help_of_what_they_run() -> None:
    marked = [b for b in doc_blocks.all_blocks() if b.not_run is not None]
    assert marked
    wrong = doc_blocks.Block(
        "README.md",
        0,
        "sh",
        "ray-otel-events list tasks --no-such-flag\nray-otel-events list rows\n"
        "ray job list --no-such-flag --address http://h:1\nmake no-such-target\n"
        ".venv/bin/python fuzz/run.py --seconds 1 --no-such-flag\n",
        "the check's own negative example",
        False,
    )
    problems = doc_blocks.help_problems([*marked, wrong])
    # Only the negative example's five errors: the docs' own commands all match.
    assert sorted(p.rsplit(": ", 1)[1] for p in problems) == [
        "--no-such-flag is not in its --help",
        "--no-such-flag is not in its --help",
        "--no-such-flag is not in its --help",
        "no Makefile target no-such-target",
        "rows is not one of {tasks,actors,nodes,workers,placement_groups,jobs,datasets,train-runs}",
    ], "\n".join(problems)


def test_every_hook_string_resolves() -> None:
    problems = doc_blocks.hook_problems(doc_blocks.all_blocks())
    assert not problems, "\n".join(problems)


def test_the_runner_reads_a_story() -> None:
    """The grouping and substitutions the runner relies on, on the README as it is."""
    readme = doc_blocks.stories("README.md")
    assert readme and all(b.lang in ("sh", "python") and b.not_run is None for s in readme for b in s)
    run = doc_blocks.FileRun("README.md")
    try:
        text = run.substitute(
            "serve --port 8265 & curl 'http://127.0.0.1:8265/x?session=session_2026-11-22_01-37-25_288381_8892'\n"
        )
        port = run.ports["8265"]
        assert text.count(port) == 2 and "8265" not in text
        assert "'\"$(docs-placeholder SESSION)\"'" in text
        assert (
            run.substitute("ray-otel-events spans /tmp/spans\n")
            == f"ray-otel-events spans {run.root}/spans\n"
        )
        # `ray stop` in a block stops the story's cluster only (an empty one here), never Ray's own stop.
        story = run.root / "s-test"
        (story / "tmp" / "ray").mkdir(parents=True)
        stopped = subprocess.run(
            ["ray", "stop"], env=run.env(story), capture_output=True, text=True, timeout=120
        )
        assert stopped.returncode == 0 and stopped.stdout == "stopped the Ray cluster of this story\n", (
            stopped
        )
    finally:
        run.close()


def _to_run(path: str) -> list[list[doc_blocks.Block]]:
    return [s for s in doc_blocks.stories(path) if doc_blocks.covering(s) is None]


def test_the_runner_fails_a_block_that_fails() -> None:
    """A command that exits non-zero ends its block, named; a server started with `&` is waited
    on by its ready line and must exit 0 with its summary after SIGTERM."""
    with doc_blocks.file_run("README.md") as run:
        block = doc_blocks.Block(
            "README.md",
            0,
            "sh",
            "ray-otel-events sink --port 4999 --out sink.jsonl &\necho first\nfalse\necho never\n",
            None,
            False,
        )
        problems = run.run_story([block])
    assert len(problems) == 1, problems
    assert "::docs-failed 3 exit 1::" in problems[0] and "first" in problems[0]
    assert "::docs-cmd 4 " not in problems[0]  # the block stopped at its failing command


@pytest.mark.parametrize("path", [p for p in doc_blocks.DOC_FILES if _to_run(p)])
def test_doc_blocks_run(path: str) -> None:
    """Each story of the file, in order (a story another one repeats whole runs there); every
    failure reported, not just the first."""
    problems: list[str] = []
    with doc_blocks.file_run(path) as run:
        for story in _to_run(path):
            problems += run.run_story(story)
    assert not problems, "\n\n".join(problems)
