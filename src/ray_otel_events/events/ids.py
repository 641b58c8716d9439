"""Ray's binary id layouts, so ids we mint look and join like Ray's.

Ray ids are fixed-size byte strings that embed their parents: a TaskID ends with the ActorID it
belongs to (nil for normal tasks), an ActorID ends with its JobID. Events carry them as bytes
(base64 in JSON); Ray's tracing attributes carry them as lowercase hex.
"""

from __future__ import annotations

import hashlib
import os

JOB_ID_SIZE = 4
ACTOR_ID_SIZE = 16
TASK_ID_SIZE = 24
PLACEMENT_GROUP_ID_SIZE = 18
UNIQUE_ID_SIZE = 28  # NodeID, WorkerID, event_id

_ACTOR_UNIQUE = ACTOR_ID_SIZE - JOB_ID_SIZE
_TASK_UNIQUE = TASK_ID_SIZE - ACTOR_ID_SIZE
_PG_UNIQUE = PLACEMENT_GROUP_ID_SIZE - JOB_ID_SIZE


def nil_id(size: int) -> bytes:
    """Ray's nil id of a given size: all 0xff."""
    return b"\xff" * size


def job_id(number: int) -> bytes:
    """JobID for the n-th job of a cluster (Ray stores it little-endian: job 1 is 01000000)."""
    return number.to_bytes(JOB_ID_SIZE, "little")


def new_actor_id(job: bytes) -> bytes:
    return os.urandom(_ACTOR_UNIQUE) + job


def nil_actor_id(job: bytes) -> bytes:
    """The actor part of a normal (non-actor) task's id."""
    return nil_id(_ACTOR_UNIQUE) + job


def new_task_id(job: bytes, actor: bytes | None = None) -> bytes:
    return os.urandom(_TASK_UNIQUE) + (actor if actor is not None else nil_actor_id(job))


def driver_task_id(job: bytes) -> bytes:
    """The driver's own task id: what tasks submitted by the driver carry as parent_task_id."""
    return nil_id(TASK_ID_SIZE - JOB_ID_SIZE) + job


def actor_creation_task_id(actor: bytes) -> bytes:
    """The task that constructs an actor: nil unique part + the actor id (Ray's layout)."""
    return nil_id(_TASK_UNIQUE) + actor


def new_placement_group_id(job: bytes) -> bytes:
    return os.urandom(_PG_UNIQUE) + job


def new_unique_id() -> bytes:
    """A random 28-byte id: worker ids and event ids."""
    return os.urandom(UNIQUE_ID_SIZE)


def node_id_for_host(hostname: str) -> bytes:
    """A stable 28-byte node id for a host (SHA-224 is exactly 28 bytes)."""
    return hashlib.sha224(hostname.encode()).digest()


def job_of_task(task: bytes) -> bytes:
    return task[-JOB_ID_SIZE:]


def actor_of_task(task: bytes) -> bytes:
    """The ActorID embedded in a TaskID (nil unique part for normal tasks)."""
    return task[-ACTOR_ID_SIZE:]
