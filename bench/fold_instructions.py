"""The store's task folds on a real Ray stream, for counting their instructions.

Replays run E's 14 POST bodies (120 events, tests/fixtures/ray-2.60/raw/runE) into a fresh SQLite
store, one POST a fold batch, as `serve` does: `--path text` through the compiled intake
(native/_post_fold.c, `Folder.fold`), `--path objects` through orjson, `prepare` and the object
folds (native/_state_fold.c where built). Deterministic, so a change to the folds is measured by
the instructions of the fold's own functions:

    PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=fold.out \\
        python bench/fold_instructions.py --path text
    callgrind_annotate --inclusive=yes fold.out | grep -E 'folder_fold|task_(definition|lifecycle)|prepare'
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import orjson

from ray_otel_events.services.state_intake import read_posted
from ray_otel_events.store.sqlite_store import EventStore
from ray_otel_events.store.state_merge import prepare

RUN = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "ray-2.60" / "raw" / "runE"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", choices=("text", "objects"), default="text")
    args = parser.parse_args()
    bodies = [path.read_bytes() for path in sorted(RUN.glob("*.body"))]
    with tempfile.TemporaryDirectory(prefix="fold-instructions-") as directory:
        store = EventStore(Path(directory) / "store.sqlite3")
        try:
            if args.path == "text" and not store.folds_posted:
                raise SystemExit("the compiled intake is not built here (native/_post_fold.c)")
            for number, body in enumerate(bodies):
                if args.path == "text":
                    accepted, errors = read_posted(body)
                    store.ingest_posted([accepted], now=1000.0 + number)
                else:
                    events = [prepare(event) for event in orjson.loads(body)]
                    store.ingest_prepared(events, now=1000.0 + number)
                    errors = []
                assert not errors, errors
            rows = store._query("SELECT count(*) FROM state_rows")[0][0]
        finally:
            store.close()
    print(f"{len(bodies)} POSTs, {sum(len(orjson.loads(b)) for b in bodies)} events, {rows} rows")


if __name__ == "__main__":
    main()
