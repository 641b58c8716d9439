"""A driver for the Ray Data and Train v2 tests: two small Ray Data pipelines and a two-worker
Train v2 run with a plain function (no torch), on the cluster RAY_ADDRESS names. It prints one JSON
line: the job id, and the train run's name."""

from __future__ import annotations

import json

import ray
import ray.data
from ray.train import RunConfig, ScalingConfig
from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer


def double(batch: dict[str, object]) -> dict[str, object]:
    batch["id"] = batch["id"] * 2  # type: ignore[operator]
    return batch


def train_fn(config: dict[str, int]) -> None:
    total = sum(range(config["n"]))
    assert total >= 0


def main() -> None:
    ray.init()
    rows = ray.data.range(40, override_num_blocks=4).map_batches(double).filter(lambda r: r["id"] % 4 == 0)
    assert rows.count() == 20
    squares = ray.data.from_items([{"x": i} for i in range(10)]).map(lambda r: {"y": r["x"] * r["x"]})
    assert sum(r["y"] for r in squares.take_all()) == 285
    trainer = DataParallelTrainer(
        train_fn,
        train_loop_config={"n": 10},
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.25}),
        run_config=RunConfig(name="tiny-run", storage_path="/tmp"),
    )
    trainer.fit()
    print(json.dumps({"job_id": ray.get_runtime_context().get_job_id()}))


if __name__ == "__main__":
    main()
