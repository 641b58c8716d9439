"""RayEventRecorder against a real gRPC AddEvents server on 127.0.0.1."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from helpers.agg_procs import returns, wait_until

from ray_otel_events.config import RecorderConfig
from ray_otel_events.events import ids
from ray_otel_events.events.builders import ActorState, EventFactory, JobState, TaskStatus, python_function
from ray_otel_events.producer import RayEventRecorder
from ray_otel_events.protobuf import events_event_aggregator_service_pb2 as svc
from ray_otel_events.protobuf import events_event_aggregator_service_pb2_grpc as svc_grpc
from ray_otel_events.protobuf.events_base_event_pb2 import RayEvent

ET = RayEvent.EventType


class CapturingAggregator(svc_grpc.EventAggregatorServiceServicer):
    """A real AddEvents server that keeps every request and can fail or stall on demand."""

    def __init__(self) -> None:
        self.requests: list[svc.AddEventsRequest] = []
        self.failed_requests: list[svc.AddEventsRequest] = []
        self.fail_next = 0
        self.delay_s = 0.0
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()

    def AddEvents(self, request: svc.AddEventsRequest, context: grpc.ServicerContext) -> svc.AddEventsReply:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            fail = self.fail_next > 0
            if fail:
                self.fail_next -= 1
        try:
            time.sleep(self.delay_s)
            if fail:
                self.failed_requests.append(request)
                context.abort(grpc.StatusCode.UNAVAILABLE, "test asked to fail")
            self.requests.append(request)
            return svc.AddEventsReply()
        finally:
            with self._lock:
                self.in_flight -= 1

    def events(self) -> list[RayEvent]:
        return [e for r in self.requests for e in r.events_data.events]


@pytest.fixture
def aggregator() -> Iterator[tuple[CapturingAggregator, str]]:
    servicer = CapturingAggregator()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    svc_grpc.add_EventAggregatorServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, f"127.0.0.1:{port}"
    server.stop(None)


NODE = ids.node_id_for_host("test-node")
JOB = ids.job_id(7)


def make_recorder(address: str, **cfg: int | float) -> RayEventRecorder:
    config = RecorderConfig(
        **{"report_interval_ms": 60_000, "rpc_timeout_s": 2.0, **cfg}
    )  # flush() drives ticks
    return RayEventRecorder.to_aggregator(address, config=config, node_id=NODE)


def test_merges_per_entity_and_type_in_first_occurrence_order(
    aggregator: tuple[CapturingAggregator, str],
) -> None:
    server, address = aggregator
    rec = make_recorder(address)
    f = EventFactory("session_x", clock_ns=iter(range(10**18, 10**18 + 100)).__next__)
    task = ids.new_task_id(JOB)
    actor = ids.new_actor_id(JOB)
    fn = python_function("mod", "f")
    rec.add(f.task_definition(task_id=task, job_id=JOB, name="f", function=fn))
    rec.add(f.task_lifecycle(task_id=task, job_id=JOB, state=TaskStatus.PENDING_ARGS_AVAIL))
    rec.add(f.actor_lifecycle(actor_id=actor, state=ActorState.PENDING_CREATION))
    rec.add(f.task_definition(task_id=task, job_id=JOB, name="SECOND", function=fn))
    rec.add(f.task_lifecycle(task_id=task, job_id=JOB, state=TaskStatus.RUNNING, worker_pid=4321))
    rec.add(f.actor_lifecycle(actor_id=actor, state=ActorState.ALIVE, pid=99))
    rec.add(f.task_lifecycle(task_id=task, job_id=JOB, state=TaskStatus.FINISHED))
    rec.add(f.task_lifecycle(task_id=task, job_id=JOB, state=TaskStatus.RUNNING, attempt=1))
    assert rec.flush(5)

    events = server.events()
    assert [e.event_type for e in events] == [
        ET.TASK_DEFINITION_EVENT,
        ET.TASK_LIFECYCLE_EVENT,
        ET.ACTOR_LIFECYCLE_EVENT,
        ET.TASK_LIFECYCLE_EVENT,  # attempt 1 is another entity
    ]
    definition, lifecycle, actor_life, retry = events
    assert definition.task_definition_event.task_name == "f"  # definitions keep the first
    assert [t.state for t in lifecycle.task_lifecycle_event.state_transitions] == [
        TaskStatus.PENDING_ARGS_AVAIL,
        TaskStatus.RUNNING,
        TaskStatus.FINISHED,
    ]
    assert lifecycle.task_lifecycle_event.worker_pid == 4321  # later set scalars overwrite
    assert lifecycle.timestamp.ToNanoseconds() == 10**18 + 1  # creation time of the first
    assert [t.state for t in actor_life.actor_lifecycle_event.state_transitions] == [
        ActorState.PENDING_CREATION,
        ActorState.ALIVE,
    ]
    assert retry.task_lifecycle_event.task_attempt == 1
    assert all(e.node_id == NODE and len(e.event_id) == 28 for e in events)
    assert len({e.event_id for e in events}) == 4
    assert len(server.requests) == 1  # one AddEventsRequest per export
    stats = rec.stats()
    assert stats["recorded"] == 8 and stats["merged"] == 4 and stats["sent"] == 4 and stats["sent_raw"] == 8
    assert rec.stop(2)


def test_profile_events_append_entries(aggregator: tuple[CapturingAggregator, str]) -> None:
    server, address = aggregator
    rec = make_recorder(address)
    f = EventFactory()
    task = ids.new_task_id(JOB)
    for i in range(3):
        rec.add(f.task_profile(task_id=task, job_id=JOB, event_name=f"e{i}", start_ns=i, end_ns=i + 1))
    assert rec.flush(5)
    (event,) = server.events()
    assert [x.event_name for x in event.task_profile_events.profile_events.events] == ["e0", "e1", "e2"]
    rec.stop(1)


def test_bounded_buffer_drops_oldest_and_counts_per_source(
    aggregator: tuple[CapturingAggregator, str],
) -> None:
    server, address = aggregator
    rec = make_recorder(address, max_queued_events=5)
    f = EventFactory()
    for n in range(6):
        rec.add(f.job_lifecycle(job_id=ids.job_id(n), state=JobState.CREATED))
    for _ in range(2):
        rec.add(f.task_lifecycle(task_id=ids.new_task_id(JOB), job_id=JOB, state=TaskStatus.RUNNING))
    stats = rec.stats()
    assert stats["dropped"] == 3
    assert stats["dropped_by_source"] == {"GCS": 3}
    assert rec.flush(5)
    sent_jobs = [
        e.driver_job_lifecycle_event.job_id
        for e in server.events()
        if e.HasField("driver_job_lifecycle_event")
    ]
    assert sent_jobs == [ids.job_id(n) for n in (3, 4, 5)]  # the oldest three went
    assert rec.stats()["recorded"] == rec.stats()["sent_raw"] + rec.stats()["dropped"]
    rec.stop(1)


def test_failed_rpc_keeps_events_and_resends_them_with_the_same_ids(
    aggregator: tuple[CapturingAggregator, str],
) -> None:
    server, address = aggregator
    server.fail_next = 1
    rec = make_recorder(address)
    f = EventFactory()
    task = ids.new_task_id(JOB)
    rec.add(f.task_lifecycle(task_id=task, job_id=JOB, state=TaskStatus.SUBMITTED_TO_WORKER))
    rec.add(f.task_lifecycle(task_id=task, job_id=JOB, state=TaskStatus.RUNNING))
    assert rec.flush(5)
    assert len(server.failed_requests) == 1
    (failed,) = server.failed_requests[0].events_data.events
    (delivered,) = server.events()
    assert delivered.event_id == failed.event_id  # a receiver can de-duplicate
    assert delivered == failed
    stats = rec.stats()
    assert stats["failed_rpcs"] == 1 and stats["requeued"] == 1 and stats["dropped"] == 0
    rec.stop(1)


def test_requeued_event_is_not_merged_with_later_ones(aggregator: tuple[CapturingAggregator, str]) -> None:
    server, address = aggregator
    server.fail_next = 1
    rec = make_recorder(address)
    f = EventFactory()
    task = ids.new_task_id(JOB)
    rec.add(f.task_lifecycle(task_id=task, job_id=JOB, state=TaskStatus.RUNNING))
    assert not rec.flush(0)  # the only attempt fails
    rec.add(f.task_lifecycle(task_id=task, job_id=JOB, state=TaskStatus.FINISHED))
    assert rec.flush(5)
    first, second = server.events()
    assert [t.state for t in first.task_lifecycle_event.state_transitions] == [TaskStatus.RUNNING]
    assert [t.state for t in second.task_lifecycle_event.state_transitions] == [TaskStatus.FINISHED]
    assert first.event_id == server.failed_requests[0].events_data.events[0].event_id
    rec.stop(1)


def test_at_most_one_rpc_in_flight(aggregator: tuple[CapturingAggregator, str]) -> None:
    server, address = aggregator
    server.delay_s = 0.05
    rec = make_recorder(address)
    f = EventFactory()

    def produce_and_flush() -> None:
        for _ in range(10):
            rec.add(f.task_lifecycle(task_id=ids.new_task_id(JOB), job_id=JOB, state=TaskStatus.RUNNING))
            rec.flush(5)

    threads = [threading.Thread(target=produce_and_flush) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert rec.flush(5)
    assert server.max_in_flight == 1
    assert len(server.events()) == 40
    rec.stop(1)


def test_periodic_export_and_stop_flush(aggregator: tuple[CapturingAggregator, str]) -> None:
    server, address = aggregator
    rec = make_recorder(address, report_interval_ms=50)
    rec.start()
    f = EventFactory()
    rec.add(f.node_definition(node_id=NODE, node_ip_address="127.0.0.1"))
    wait_until(server.events, "the event exported by the timer, no flush call")
    assert len(server.events()) == 1
    rec.add(f.job_definition(job_id=JOB, driver_pid=1, entrypoint="x"))
    assert rec.stop(5)
    assert len(server.events()) == 2
    rec.add(f.job_lifecycle(job_id=JOB, state=JobState.FINISHED))  # refused after stop, and counted
    assert rec.stats()["dropped"] == 1


def test_stop_is_bounded_when_the_aggregator_is_unreachable() -> None:
    rec = make_recorder("127.0.0.1:1", rpc_timeout_s=0.2)
    rec.add(EventFactory().job_lifecycle(job_id=JOB, state=JobState.CREATED))
    # stop() gives up at its timeout rather than retrying for good, saying not everything went
    assert returns(lambda: rec.stop(0.5), "stop() on an unreachable aggregator") is False
    stats = rec.stats()
    assert stats["dropped"] == 1 and stats["pending"] == 0 and stats["failed_rpcs"] >= 1
