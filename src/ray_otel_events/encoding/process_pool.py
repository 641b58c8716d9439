"""Encode RayEvent batches in worker processes.

The aggregator's event loop receives gRPC calls, buffers and sends HTTP on one core; JSON encoding
is most of its CPU (about three quarters). Worker processes let encoding use the other cores while
the loop keeps receiving. Workers ignore SIGINT/SIGTERM (the aggregator decides when to stop and
still needs them to flush) and exit by themselves if the aggregator dies.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import ProcessPoolExecutor

from ray_otel_events.encoding.ray_json import EncodeResult, RayEventJsonEncoder

_worker_encoder: RayEventJsonEncoder | None = None


def _exit_when_orphaned(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def _init_worker(preserve_proto_field_name: bool, parent: int) -> None:
    global _worker_encoder
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    threading.Thread(target=_exit_when_orphaned, args=(parent,), daemon=True).start()
    _worker_encoder = RayEventJsonEncoder(preserve_proto_field_name=preserve_proto_field_name)


def _encode(wires: list[bytes]) -> EncodeResult:
    assert _worker_encoder is not None
    return _worker_encoder.try_encode_serialized(wires)


class EncoderProcessPool:
    """`try_encode_serialized` of a RayEventJsonEncoder, run in `processes` spawned workers."""

    def __init__(self, preserve_proto_field_name: bool, processes: int) -> None:
        if processes < 1:
            raise ValueError(f"an encoder pool needs at least one process, got {processes}")
        self.processes = processes
        self._executor = ProcessPoolExecutor(
            processes,
            mp_context=multiprocessing.get_context("spawn"),  # fork is unsafe in a gRPC process
            initializer=_init_worker,
            initargs=(preserve_proto_field_name, os.getpid()),
        )

    def warm_up(self) -> None:
        """Start every worker now, so the first batches do not wait for interpreters to boot."""
        for future in [self._executor.submit(_encode, []) for _ in range(self.processes)]:
            future.result()

    async def try_encode_serialized(self, wires: list[bytes]) -> EncodeResult:
        return await asyncio.get_running_loop().run_in_executor(self._executor, _encode, wires)

    def close(self) -> None:
        self._executor.shutdown(wait=True)
