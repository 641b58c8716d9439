"""The names that tie RayEvents to OpenTelemetry data, in one place.

Ray's own tracing names (span names ending in ` ray.remote` / ` ray.remote_worker`, attributes
`ray.task_id` etc. holding ids in hex) are reused as they are, so spans from Ray's hooks and ours
read the same. Our additions are prefixed `ray.` too where they describe Ray entities, and
`ray_otel_events.` where they describe this package's own bookkeeping.
"""

from __future__ import annotations

# Span name suffixes Ray uses: PRODUCER on submit, CONSUMER on execution.
SUBMIT_SUFFIX = " ray.remote"
EXECUTE_SUFFIX = " ray.remote_worker"

# Attributes Ray's tracing helper sets (ids in lowercase hex, pid as a string).
RAY_REMOTE = "ray.remote"  # "function" or "actor"
RAY_FUNCTION = "ray.function"
RAY_PID = "ray.pid"
RAY_JOB_ID = "ray.job_id"
RAY_NODE_ID = "ray.node_id"
RAY_TASK_ID = "ray.task_id"
RAY_WORKER_ID = "ray.worker_id"
RAY_ACTOR_CLASS = "ray.actor_class"
RAY_ACTOR_METHOD = "ray.actor_method"
RAY_ACTOR_ID = "ray.actor_id"

# Our additions on task / actor spans.
RAY_TASK_ATTEMPT = "ray.task_attempt"
RAY_TASK_NAME = "ray.task_name"
RAY_PARENT_TASK_ID = "ray.parent_task_id"
RAY_PLACEMENT_GROUP_ID = "ray.placement_group_id"
RAY_SUBMISSION_ID = "ray.submission_id"
RAY_SESSION_NAME = "ray.session_name"
RAY_EVENT_TYPE = "ray.event_type"  # EventType name, on log records
RAY_STATE = "ray.state"  # the state a transition entered, on span events and log records

# Task log lines (OpenTelemetry semantic conventions): the stream a line was written to
# (stdout / stderr), the writing process, and the function it ran in.
LOG_IOSTREAM = "log.iostream"
PROCESS_PID = "process.pid"
CODE_FUNCTION = "code.function"
CODE_FUNCTION_NAME = "code.function.name"  # the newer name, what the SDK's LoggingHandler sets

# Log records: event_name is EVENT_NAME_PREFIX + the EventType name in lower case,
# e.g. "ray.task_lifecycle_event". The body is the whole RayEvent as the aggregator posts it
# (protobuf JSON mapping, camelCase), so a receiver can rebuild the event exactly.
EVENT_NAME_PREFIX = "ray."

# Bookkeeping of this package.
PRODUCER_ATTR = "ray_otel_events.producer"  # which of our components made the span or record
# Its value on the spans the hooks' task-event processor handles and on the event records it makes.
TASK_EVENT_PRODUCER = "task_event_span_processor"
INCOMPLETE_ATTR = "ray_otel_events.incomplete"  # span closed by a time limit or shutdown
INSTRUMENTATION_SCOPE = "ray_otel_events"


def event_name_for(event_type_name: str) -> str:
    return EVENT_NAME_PREFIX + event_type_name.lower()
