"""Reading span files (ours `<pid>.json`, Ray's `<pid>.txt`) into trees and Chrome trace events.

Both hooks write one `ReadableSpan.to_json()` object per line. A trace's spans are spread over the
files of every process it touched; here they are joined by trace id and parent id, each trace
rendered as an indented tree (name, kind, duration, status, pid), or written as Chrome trace-event
JSON (one slice per span on a per-process track, flow arrows from a span to its children in other
processes) that Perfetto and chrome://tracing open.
"""

from __future__ import annotations

import datetime
import json
import os
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SPAN_FILE_PATTERNS = ("*.json", "*.txt")


@dataclass(frozen=True)
class SpanRecord:
    """One span line, with ids as lowercase hex without `0x` and times in ns since the epoch."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str | None
    kind: str  # PRODUCER, CONSUMER, INTERNAL, SERVER, CLIENT
    start_ns: int
    end_ns: int
    status: str  # UNSET, OK, ERROR
    status_description: str
    pid: int | None
    attributes: dict[str, Any]
    events: list[dict[str, Any]]
    source: str

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)


@dataclass
class SpanSet:
    """Spans read from files, plus what could not be read (file:line: reason)."""

    spans: list[SpanRecord] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    files: int = 0


def _hex_id(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"bad id {value!r}")
    text = value.lower().removeprefix("0x")
    int(text, 16)
    return text


def _iso_to_ns(value: Any) -> int:
    if not isinstance(value, str):
        raise ValueError(f"bad timestamp {value!r}")
    moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    delta = moment - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000


def parse_span_line(line: str, source: str = "", default_pid: int | None = None) -> SpanRecord:
    """One line of a span file; ValueError (with a reason) if it is not a span object."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg})") from None
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    try:
        context = obj["context"]
        attributes = obj.get("attributes") or {}
        status = obj.get("status") or {}
        pid_text = attributes.get("ray.pid")
        pid = int(pid_text) if isinstance(pid_text, (str, int)) and str(pid_text).isdigit() else default_pid
        parent = obj.get("parent_id")
        return SpanRecord(
            name=str(obj["name"]),
            trace_id=_hex_id(context["trace_id"]),
            span_id=_hex_id(context["span_id"]),
            parent_id=_hex_id(parent) if parent else None,
            kind=str(obj.get("kind", "SpanKind.INTERNAL")).removeprefix("SpanKind."),
            start_ns=_iso_to_ns(obj["start_time"]),
            end_ns=_iso_to_ns(obj["end_time"]),
            status=str(status.get("status_code", "UNSET")),
            status_description=str(status.get("description", "")),
            pid=pid,
            attributes=dict(attributes),
            events=list(obj.get("events") or []),
            source=source,
        )
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a span object (missing or bad {exc})") from None


def _span_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    found: set[Path] = set()
    for pattern in SPAN_FILE_PATTERNS:
        found.update(p for p in path.glob(pattern) if p.is_file())
    return sorted(found)


def read_spans(path: str | os.PathLike[str]) -> SpanSet:
    """Every span in a folder's `*.json` and `*.txt` files (or in one file). Raises FileNotFoundError."""
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"{root}: no such file or folder")
    result = SpanSet()
    for file in _span_files(root):
        result.files += 1
        stem_pid = int(file.stem) if file.stem.isdigit() else None
        try:
            text = file.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            result.problems.append(f"{file}: {exc.strerror or exc}")
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                result.spans.append(parse_span_line(line, str(file), stem_pid))
            except ValueError as exc:
                result.problems.append(f"{file}:{number}: {exc}")
    return result


# -- selecting and rendering -------------------------------------------------------------------


def group_by_trace(spans: Iterable[SpanRecord]) -> dict[str, list[SpanRecord]]:
    """Spans per trace id, each list sorted by start time; traces ordered by their first span."""
    traces: dict[str, list[SpanRecord]] = defaultdict(list)
    for span in spans:
        traces[span.trace_id].append(span)
    for members in traces.values():
        members.sort(key=lambda s: (s.start_ns, s.span_id))
    return dict(sorted(traces.items(), key=lambda item: (item[1][0].start_ns, item[0])))


def select_traces(
    spans: Iterable[SpanRecord], *, trace_id: str | None = None, name: str | None = None
) -> dict[str, list[SpanRecord]]:
    """Traces whose id starts with `trace_id` (hex, `0x` optional) and that hold a span whose name
    contains `name`; each selected trace is kept whole."""
    want = trace_id.lower().removeprefix("0x") if trace_id else None
    selected = {}
    for tid, members in group_by_trace(spans).items():
        if want is not None and not tid.startswith(want):
            continue
        if name is not None and not any(name in span.name for span in members):
            continue
        selected[tid] = members
    return selected


def _duration(ns: int) -> str:
    if ns >= 1_000_000_000:
        return f"{ns / 1e9:.3f} s"
    if ns >= 1_000_000:
        return f"{ns / 1e6:.3f} ms"
    return f"{ns / 1e3:.1f} µs"


def _span_line(span: SpanRecord, depth: int, orphan: bool) -> str:
    status = span.status
    if span.status_description:
        status = f"{status} ({span.status_description})"
    pid = "?" if span.pid is None else str(span.pid)
    note = f"  [parent 0x{span.parent_id} not in files]" if orphan else ""
    indent = "  " * (depth + 1)
    return f"{indent}[{span.kind}] {span.name}  {_duration(span.duration_ns)}  {status}  pid={pid}{note}"


def _walk(
    span: SpanRecord, children: dict[str, list[SpanRecord]], depth: int, seen: set[str]
) -> Iterator[tuple[SpanRecord, int]]:
    seen.add(span.span_id)
    yield span, depth
    for child in children.get(span.span_id, []):
        if child.span_id not in seen:  # a malformed file could make a cycle
            yield from _walk(child, children, depth + 1, seen)


def render_trace(trace_id: str, members: list[SpanRecord]) -> str:
    """One trace as an indented tree; spans whose parent is in no file are shown as roots, marked."""
    ids = {span.span_id for span in members}
    children: dict[str, list[SpanRecord]] = defaultdict(list)
    roots = []
    for span in members:
        if span.parent_id is not None and span.parent_id in ids and span.parent_id != span.span_id:
            children[span.parent_id].append(span)
        else:
            roots.append(span)
    start = min(s.start_ns for s in members)
    end = max(s.end_ns for s in members)
    pids = {s.pid for s in members if s.pid is not None}
    lines = [f"trace 0x{trace_id}  {len(members)} spans, {len(pids)} processes, {_duration(end - start)}"]
    seen: set[str] = set()
    for root in roots:
        for span, depth in _walk(root, children, 0, seen):
            orphan = depth == 0 and span.parent_id is not None
            lines.append(_span_line(span, depth, orphan))
    for span in members:  # only reachable through a cycle
        if span.span_id not in seen:
            lines.append(_span_line(span, 0, True))
    return "\n".join(lines)


def render_traces(traces: dict[str, list[SpanRecord]]) -> str:
    return "\n".join(render_trace(tid, members) for tid, members in traces.items())


# -- Chrome trace events -----------------------------------------------------------------------


def _assign_lanes(spans: list[SpanRecord]) -> dict[str, int]:
    """Per process, put spans on tracks where they nest properly (concurrent spans get another)."""
    lanes: list[list[int]] = []  # stack of end times per lane
    out = {}
    for span in sorted(spans, key=lambda s: (s.start_ns, -s.end_ns)):
        for index, stack in enumerate(lanes):
            while stack and stack[-1] <= span.start_ns:
                stack.pop()
            if not stack or span.end_ns <= stack[-1]:
                stack.append(span.end_ns)
                out[span.span_id] = index
                break
        else:
            lanes.append([span.end_ns])
            out[span.span_id] = len(lanes) - 1
    return out


def chrome_trace(traces: dict[str, list[SpanRecord]]) -> dict[str, Any]:
    """Chrome trace-event JSON ("X" slices, "s"/"f" flows across processes, process names)."""
    events: list[dict[str, Any]] = []
    all_spans = [span for members in traces.values() for span in members]
    by_pid: dict[int, list[SpanRecord]] = defaultdict(list)
    for span in all_spans:
        by_pid[span.pid if span.pid is not None else 0].append(span)
    lane: dict[str, tuple[int, int]] = {}
    for pid, spans in sorted(by_pid.items()):
        events.append(
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": f"pid {pid}"}}
        )
        for span_id, index in _assign_lanes(spans).items():
            lane[span_id] = (pid, index)
    by_id = {span.span_id: span for span in all_spans}
    flow = 0
    for span in all_spans:
        pid, tid = lane[span.span_id]
        args: dict[str, Any] = {
            "trace_id": f"0x{span.trace_id}",
            "span_id": f"0x{span.span_id}",
            "parent_id": f"0x{span.parent_id}" if span.parent_id else None,
            "kind": span.kind,
            "status": span.status,
        }
        if span.status_description:
            args["status_description"] = span.status_description
        args.update({f"attr.{k}": v for k, v in span.attributes.items()})
        events.append(
            {
                "name": span.name,
                "cat": span.kind.lower(),
                "ph": "X",
                "ts": span.start_ns / 1000,
                "dur": span.duration_ns / 1000,
                "pid": pid,
                "tid": tid,
                "args": args,
            }
        )
        parent = by_id.get(span.parent_id or "")
        if parent is not None and lane[parent.span_id][0] != pid:
            flow += 1
            ppid, ptid = lane[parent.span_id]
            common = {"name": "context", "cat": "propagation", "id": flow}
            events.append({**common, "ph": "s", "ts": parent.start_ns / 1000, "pid": ppid, "tid": ptid})
            events.append(
                {**common, "ph": "f", "bp": "e", "ts": span.start_ns / 1000, "pid": pid, "tid": tid}
            )
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def largest_trace_tree(path: str | os.PathLike[str], *, name: str | None = None) -> str:
    """The tree of the trace with the most spans in a spans folder (among those holding a span whose
    name contains `name`), or "" when there is none: what a demo shows as "one trace"."""
    traces = select_traces(read_spans(path).spans, name=name)
    if not traces:
        return ""
    trace_id, members = max(traces.items(), key=lambda item: (len(item[1]), item[1][0].start_ns))
    return render_trace(trace_id, members)
