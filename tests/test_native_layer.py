"""The compiled helpers are listed in one place each, and the lists agree: setup.py's modules, the
C sources and stubs in native/, and the table in docs/native.md (which the README points to). Then
the numbers shared between C and Python: the wire schema's kinds, the JSON writer's kinds,
AnyValue's members, and the fields of Ray's
messages the converter's core reads (by name, numbered from the descriptors). Then the names the
store's task folds read and write: bound from store/fold_schema.py, typed in neither C file. No
build needed for the first part."""

from __future__ import annotations

import dataclasses
import importlib
import re
import types
import typing
from pathlib import Path
from typing import Any

import pytest

from ray_otel_events import native
from ray_otel_events.encoding import ray_json, ray_json_decode
from ray_otel_events.otel import plain_records
from ray_otel_events.protobuf._pool import field_numbers
from tests.helpers.built_modules import build_problem, setup_modules
from tests.helpers.pure_python import skip_unless_compiled

ROOT = Path(__file__).resolve().parent.parent
NATIVE = ROOT / "src" / "ray_otel_events" / "native"


def _setup_modules() -> set[str]:
    modules = setup_modules()
    assert len(modules) == len(set(modules)), "a module listed twice in setup.py"
    return set(modules)


def _documented_modules() -> set[str]:
    """The first column of docs/native.md's table of modules."""
    text = (ROOT / "docs" / "native.md").read_text()
    return set(re.findall(r"^\| `(_[a-z_]+)` \|", text, flags=re.MULTILINE))


def test_setup_sources_stubs_and_docs_list_the_same_modules() -> None:
    built = _setup_modules()
    assert built == {p.stem for p in NATIVE.glob("*.c")}
    assert built == {p.stem for p in NATIVE.glob("*.pyi")}
    assert built == _documented_modules()
    assert not list(NATIVE.parent.glob("*.c")) and not list(NATIVE.parent.glob("*.h"))  # one folder


def test_the_readme_points_to_the_list_instead_of_keeping_its_own() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "(docs/native.md)" in readme
    assert not re.search(r"^- `native/_[a-z_]+\.c`", readme, flags=re.MULTILINE)


@pytest.mark.parametrize("name", sorted(_setup_modules()))
def test_every_module_setup_py_lists_is_built(name: str) -> None:
    """setup.py builds each module optionally (a user's install goes on without a compiler or the
    headers, running the Python twins), so a module that failed to build would only turn its tests
    into skips: the suite (`make test` installs what the builds need) holds the build to all of them."""
    problem = build_problem(name)
    assert problem is None, problem


def _built(name: str) -> types.ModuleType:
    try:
        return importlib.import_module(f"ray_otel_events.native.{name}")
    except ImportError:
        pytest.skip(f"{name} is not built")


@pytest.mark.parametrize("name", ["_ray_json_wire", "_log_events", "_posted_events"])
def test_the_wire_schema_readers_number_kinds_as_the_python_side(name: str) -> None:
    module = _built(name)
    ray_json_decode.check_wire_kinds(module)  # refuses a module built from other numbers
    assert module.K_TIMESTAMP == ray_json_decode.K_TIMESTAMP and module.MAP == ray_json_decode.MAP


@pytest.mark.parametrize("name", ["_any_value_wire", "_log_events"])
def test_the_any_value_readers_number_members_as_the_descriptor(name: str) -> None:
    module = _built(name)
    native.check_numbers(module, plain_records.ANY_VALUE_MEMBERS)
    assert module.A_STRING == 1 and module.A_KVLIST == plain_records.ANY_VALUE_MEMBERS["A_KVLIST"] == 6


def test_the_json_writer_numbers_kinds_as_the_python_side() -> None:
    module = _built("_ray_json_encode")
    native.check_numbers(module, ray_json.ENCODE_KINDS)
    assert module.E_TIMESTAMP == 17 and module.L_MAP == 3


@pytest.mark.parametrize(
    ("name", "numbers", "changed"),
    [
        ("_ray_json_wire", ray_json_decode.WIRE_KINDS, "K_TIMESTAMP"),
        ("_ray_json_encode", ray_json.ENCODE_KINDS, "L_PRESENCE"),
        ("_any_value_wire", plain_records.ANY_VALUE_MEMBERS, "A_BYTES"),
    ],
)
def test_a_module_with_other_numbers_is_refused(name: str, numbers: dict[str, int], changed: str) -> None:
    module = _built(name)
    stale = types.ModuleType("stale")
    stale.__dict__.update({k: v for k, v in vars(module).items() if k.isupper()})
    setattr(stale, changed, 99)
    with pytest.raises(ImportError, match=changed):
        native.check_numbers(stale, numbers)
    delattr(stale, changed)  # a number missing is refused too
    with pytest.raises(ImportError, match=changed):
        native.check_numbers(stale, numbers)
    if name == "_ray_json_wire":
        with pytest.raises(ImportError, match=changed):
            ray_json_decode.check_wire_kinds(stale)


def test_every_field_the_core_reads_is_in_the_descriptors() -> None:
    """The core names Ray's fields; a renamed or removed field fails at import, and here."""
    module = _built("_entity_spans")
    names = module.RAY_FIELDS
    assert len(names) == len(set(names)) > 0
    numbers = field_numbers(names)
    assert numbers["ray.rpc.events.TaskLifecycleEvent.state_transitions"] == 3
    assert numbers["ray.rpc.events.ActorTaskDefinitionEvent.actor_func"] == 4


def test_the_core_refuses_a_binding_that_does_not_name_what_it_reads() -> None:
    """A field of Ray's it reads without a number, or a task's part the named tuple lacks, fails
    bind() with the name; the good binding then binds again and reads by name."""
    module = _built("_entity_spans")
    from ray_otel_events.otel import from_ray_events

    skip_unless_compiled(from_ray_events._compiled, "the compiled core")
    good = from_ray_events._CORE_BINDING
    missing = "ray.rpc.RayErrorInfo.error_type"
    renamed = [("kind" if f == "task_type" else f, Any) for f in from_ray_events._TaskParts._fields]
    other_parts = typing.NamedTuple("other_parts", renamed)  # type: ignore[misc]
    try:
        fields = {k: v for k, v in good.ray_fields.items() if k != missing}
        with pytest.raises(ValueError, match=re.escape(missing)):
            module.bind(dataclasses.replace(good, ray_fields=fields))
        with pytest.raises(ValueError, match="task_type"):
            module.bind(dataclasses.replace(good, task_parts_type=other_parts))
        with pytest.raises(AttributeError, match="span_keys"):
            module.bind(
                types.SimpleNamespace(**{k: getattr(good, k) for k in good.__slots__ if k != "span_keys"})
            )
        with pytest.raises(TypeError, match="after bind"):
            module.task_parts(None, False, b"")
    finally:
        module.bind(good)
    definition = from_ray_events.TaskDefinitionEvent(task_name="t", task_type=1).SerializeToString()
    parts = module.task_parts(definition, False, b"")
    assert isinstance(parts, from_ray_events._TaskParts)
    assert (parts.name, parts.task_type, parts.error_type) == ("t", 1, None)


def test_the_head_reader_refuses_a_binding_without_its_fields() -> None:
    """The head reader names the envelope's fields and the FunctionDescriptor's: a field without a
    number, or an envelope number past its table, fails bind_fields() with the name and leaves it
    unbound (head() refuses); the good binding then reads again."""
    module = _built("_event_head")
    from ray_otel_events.otel import event_heads

    skip_unless_compiled(event_heads._compiled, "the compiled head reader")
    numbers = field_numbers(module.RAY_FIELDS)
    assert numbers["ray.rpc.events.RayEvent.node_id"] == 18
    assert numbers["ray.rpc.PythonFunctionDescriptor.function_hash"] == 4
    members = event_heads._function_members()  # from the descriptors: Java's, Python's, C++'s
    assert members == {1: 3, 2: 4, 3: 3}
    missing = "ray.rpc.events.RayEvent.session_name"
    try:
        with pytest.raises(ValueError, match=re.escape(missing)):
            module.bind_fields({k: v for k, v in numbers.items() if k != missing}, members)
        with pytest.raises(TypeError, match="after bind"):
            module.head(b"")
        with pytest.raises(ValueError, match="node_id"):
            module.bind_fields({**numbers, "ray.rpc.events.RayEvent.node_id": 64}, members)
        with pytest.raises(ValueError, match="no Python or Java member"):
            module.bind_fields(numbers, {k: v for k, v in members.items() if k != 2})
    finally:
        event_heads._bind()
    event = event_heads.RayEvent(event_id=b"e", event_type=1, session_name="s", node_id=b"n")
    assert module.head(event.SerializeToString()) == event_heads.python_head(event)


def _c_strings(name: str, leave_out: frozenset[str] = frozenset()) -> set[str]:
    """The string literals of a C source and the headers it includes from native/ (but `leave_out`)."""
    text = (NATIVE / name).read_text()
    for header in re.findall(r'#include "([a-z_]+\.h)"', text):
        if header not in leave_out:
            text += (NATIVE / header).read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.DOTALL)  # comments name what they read
    return set(re.findall(r'"((?:[^"\\\n]|\\.)*)"', text))


@pytest.mark.parametrize("name", ["_state_fold.c", "_post_fold.c"])
def test_the_task_folds_type_no_name_of_the_fold_table(name: str) -> None:
    """Ray's keys, the task row's fields and the values and states the folds write or compare are
    fold_schema's, bound at import: none is typed in the C (as a string, quoted or not)."""
    from ray_otel_events.store import fold_schema

    names = {*dataclasses.astuple(fold_schema.RAY_KEYS), *dataclasses.astuple(fold_schema.TASK_ROW)}
    values = fold_schema.TASK_VALUES
    names |= {values.actor_task, values.normal_task, values.python, *values.pending, *values.running}
    names |= set(values.ended)
    # row_packing.h's ROW_ID_PREFIXES say `"node_id":"` as stored rows' dictionaries hold it: a
    # format, fixed for ever like row_packing.ROW_DICTIONARY (its twin), not the fold's names, which
    # may change without changing how a stored row is read.
    strings = _c_strings(name, leave_out=frozenset({"row_packing.h"}))
    typed = {s for s in strings if s in names or s.strip('\\"{,:') in names}
    assert not typed, f"{name} types {sorted(typed)}: bind them from store/fold_schema.py"


def test_the_fold_table_takes_ray_keys_from_the_descriptors() -> None:
    """Each of Ray's keys is its protobuf field's json_name; the state groups are TaskStatus names."""
    from ray_otel_events.protobuf import common_pb2
    from ray_otel_events.store import fold_schema

    keys = fold_schema.RAY_KEYS
    assert (keys.event_id, keys.task_name, keys.python_function_descriptor) == (
        "eventId",
        "taskName",
        "pythonFunctionDescriptor",
    )
    assert (keys.state_transitions, keys.ray_error_info, keys.stderr_end) == (
        "stateTransitions",
        "rayErrorInfo",
        "stderrEnd",
    )
    statuses = set(common_pb2.TaskStatus.keys())
    groups = fold_schema.TASK_VALUES
    assert {*groups.pending, *groups.running, *groups.ended} <= statuses


@pytest.mark.parametrize("name", ["_state_fold", "_post_fold"])
def test_the_folds_refuse_a_table_without_a_name_they_read(name: str) -> None:
    """bind_names reads each name the C uses by attribute: a table without one, or with something
    else than a name there, is refused with the name (at import, not a crash in a fold), and
    leaves the good binding in place."""
    module = _built(name)
    from ray_otel_events.store import fold_schema, state_merge

    skip_unless_compiled(True, "the compiled folds (state_merge binds them only when on)")

    keys, row, values = fold_schema.RAY_KEYS, fold_schema.TASK_ROW, fold_schema.TASK_VALUES
    fields = [field.name for field in dataclasses.fields(row) if field.name != "created_ns"]
    short_row = types.SimpleNamespace(**{field: getattr(row, field) for field in fields})
    with pytest.raises(ValueError, match="TASK_ROW has no created_ns"):
        module.bind_names(keys, short_row, values)
    with pytest.raises(TypeError, match=r"RAY_KEYS\.task_name is not a name"):
        module.bind_names(dataclasses.replace(keys, task_name=3), row, values)
    with pytest.raises(TypeError, match=r"TASK_VALUES\.pending is not a tuple of names"):
        module.bind_names(keys, row, dataclasses.replace(values, pending="PENDING_ARGS_AVAIL"))
    if name == "_post_fold":
        with pytest.raises(ValueError, match="names two fields"):
            module.bind_names(keys, dataclasses.replace(row, name=row.type), values)
    module.bind_names(keys, row, values)  # as state_merge bound it
    fold = module.task_lifecycle if name == "_state_fold" else state_merge._task_lifecycle
    folded: dict[str, Any] = {}
    fold(folded, {keys.state_transitions: [{keys.state: values.running[0]}]})
    assert folded[row.start_time_ms] == 0 and folded[row.state] == values.running[0]
