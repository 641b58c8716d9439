"""Regenerate src/ray_otel_events/protobuf from proto/ (what `make proto` runs).

The generated modules register into a private descriptor pool, not protobuf's default one: Ray's
own generated code defines the same `ray.rpc.*` symbols, and both must load in one process (our
tracing hook runs inside Ray workers).
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc  # type: ignore[import-untyped]

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PACKAGE_DIR = "ray_otel_events/protobuf"
TARGET = ROOT / "src" / PACKAGE_DIR
SERVICE_FILES = {"events_event_aggregator_service.proto"}
HANDWRITTEN = {"__init__.py", "_pool.py"}


def _protoc(args: list[str], proto_root: Path) -> None:
    include = str(Path(protoc.__file__).parent / "_proto")
    if protoc.main(["protoc", f"-I{proto_root}", f"-I{include}", *args]) != 0:
        raise SystemExit(f"protoc failed: {' '.join(args)}")


def _use_private_pool(source: str) -> str:
    source = source.replace(
        "from google.protobuf import descriptor_pool as _descriptor_pool\n",
        "from ray_otel_events.protobuf._pool import POOL as _POOL\n",
    )
    return source.replace("_descriptor_pool.Default()", "_POOL")


def generate(dest: Path, proto_root: Path = PROTO_ROOT) -> list[Path]:
    """Write the generated modules for every .proto under proto_root (tests give a changed copy)
    into dest; return the files written."""
    protos = sorted((proto_root / PACKAGE_DIR).glob("*.proto"))
    rel = [str(p.relative_to(proto_root)) for p in protos]
    with tempfile.TemporaryDirectory() as tmp:
        _protoc([f"--python_out={tmp}", f"--pyi_out={tmp}", *rel], proto_root)
        _protoc([f"--grpc_python_out={tmp}", *[r for r in rel if Path(r).name in SERVICE_FILES]], proto_root)
        written = []
        for produced in sorted((Path(tmp) / PACKAGE_DIR).iterdir()):
            text = produced.read_text()
            if produced.name.endswith("_pb2.py"):
                text = _use_private_pool(text)
            text = re.sub(r"[ \t]+\n", "\n", text)
            out = dest / produced.name
            out.write_text(text)
            written.append(out)
    return written


def main() -> int:
    for old in TARGET.iterdir():
        if old.name not in HANDWRITTEN and old.is_file():
            old.unlink()
    written = generate(TARGET)
    for cache in TARGET.glob("__pycache__"):
        shutil.rmtree(cache)
    print(f"generated {len(written)} files into {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
