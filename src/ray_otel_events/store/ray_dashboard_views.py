"""What Ray's own dashboard page asks, answered from the store, in Ray 2.60's shapes.

The page (shipped in the `ray` package) polls Ray's dashboard modules: jobs (`/api/jobs/`), the
node head (`/nodes`, `/logical/actors`), events, the autoscaler's text status, the state API's logs
and timeline, and metrics health checks. Each answer here restates the shape Ray's module returns
(read from the installed package), filled from stored rows: what the event stream said about jobs,
actors, nodes, workers and tasks, and the task log lines kept beside them. What the stream never
carries (a node's live CPU and memory, Grafana, Serve, Ray Data) is answered as Ray answers when
that part is absent, so the page shows it empty rather than broken.

An answer is `(HTTP status, body)`: a str body is plain text, anything else is JSON.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
import time
from collections.abc import Callable
from typing import Any

from ray_otel_events import config
from ray_otel_events.encoding.ray_export_events import DATASET, SUBMISSION_JOB, TRAIN_RUN, TRAIN_RUN_ATTEMPT
from ray_otel_events.store import ray_export_views, state_query
from ray_otel_events.store.state_merge import ACTORS, JOBS, NODES, TASKS, WORKERS, Row
from ray_otel_events.store.views import RAY_VERSION, Answer, BadRequest, Params, StoreViews

ALL = 10**9  # "every row": the dashboard's lists have no paging of their own
NIL_ID = "ffffffffffffffffffffffffffffffffffffffffffffffffffffffff"
# Ray's Chrome-trace colours by profile event (ray/_private/profiling.py); any other is generic_work.
_TRACE_COLOURS = {
    "worker_idle": "cq_build_abandoned",
    "task": "rail_response",
    "task:deserialize_arguments": "rail_load",
    "task:execute": "rail_animation",
    "task:store_outputs": "rail_idle",
    "wait_for_function": "detailed_memory_dump",
    "ray.get": "good",
    "ray.put": "terrible",
    "ray.wait": "vsync_highlight_color",
    "submit_task": "background_memory_dump",
    "fetch_and_run_function": "detailed_memory_dump",
    "register_remote_function": "detailed_memory_dump",
}
_PROFILING_DEFAULTS = {
    "native": False,
    "subprocesses": False,
    "idle": False,
    "leaks": False,
    "tracePythonAllocators": False,
    "cpuDuration": 5,
    "memoryDuration": 10,
    "maxDuration": 60,
    "cpuFormat": "flamegraph",
    "memoryFormat": "flamegraph",
    "pyspyNativeSupported": False,
}
# Ray's task-log suffixes: logging goes to a worker's stderr, as Ray's default handler writes it.
_STREAMS = {"out": ("stdout",), "err": ("stderr", "log")}
_DRIVER_LOG = re.compile(r"job-driver-(.+)\.log")  # Ray's job manager's file of a submitted job's driver
_WORKER_FILE = re.compile(r"worker-([0-9a-f]+)-([0-9a-f]+)-(\d+)\.(out|err)")
TRAIN_V1_ABSENT = (  # Ray's own words (dashboard/modules/train/train_head.py)
    "Train state data is not available. Please make sure Ray Train is running and that the Train state"
    ' actor is enabled by setting the RAY_TRAIN_ENABLE_STATE_TRACKING environment variable to "1".'
)
NOT_RECORDED = "not recorded in the event store: this dashboard is served from stored events"
CONSTRUCTOR_FAILED = "creation_task_failure_context"
_ACTOR_DIED = "ray.exceptions.ActorDiedError: "  # the error a failed constructor is raised as
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# The actor Ray's job manager starts per submitted job (JOB_ACTOR_NAME_TEMPLATE in
# ray/dashboard/modules/job/common.py): created when the job is submitted, it exits once the job
# ended, so its times are the submission's, as Ray's job table keeps them.
SUPERVISOR_CLASS, SUPERVISOR_PREFIX = "JobSupervisor", "_ray_internal_job_actor_"
_ENDED = ("SUCCEEDED", "FAILED", "STOPPED")
# A placement group's resources as the scheduler names them: `CPU_group_<pg>`,
# `CPU_group_<bundle>_<pg>`, and the `bundle_group_...` marker every bundle adds.
_GROUP_RESOURCE = re.compile(r"(.+)_group_(?:\d+_)?[0-9a-f]{36}")
MAX_SERVED_BYTES = 64 * 1024 * 1024  # a collected file's end served, at most (`ray logs` tails it)
DRIVER_LOGS_NOT_COLLECTED = (
    "The driver's output of job {job} was not collected by this store: Ray keeps a submitted "
    "job's driver log on its head node, and the event stream does not carry it (run "
    "`ray-otel-events collect --to URL` beside `ray start` to ship it).\n"
)


def requested_resources(resources: dict[str, float]) -> dict[str, float]:
    """What an actor asked for (`{"CPU": 0.25}`), as Ray's actor page shows it, from the
    resources of its placement group's bundle it was scheduled with."""
    asked: dict[str, float] = {}
    for name, amount in resources.items():
        grouped = _GROUP_RESOURCE.fullmatch(name)
        if grouped is None:
            asked[name] = amount
        elif grouped[1] != "bundle":
            asked[grouped[1]] = amount
    return asked


def rest(message: str, ok: bool = True, **data: Any) -> dict[str, Any]:
    """Ray's `rest_response` body: `{"result", "msg", "data"}`."""
    return {"result": ok, "msg": message, "data": data}


def _first_ms(row: Row, state: str) -> int | None:
    times = [e["created_ms"] for e in row.get("events") or [] if e.get("state") == state]
    return times[0] if times else None


def exit_detail(death_cause: dict[str, Any] | None) -> str:
    """The message Ray's node head shows for a dead actor, from its death cause."""
    cause = death_cause or {}
    for context, key in (
        ("actor_died_error_context", "error_message"),
        ("runtime_env_failed_context", "error_message"),
        ("actor_unschedulable_context", "error_message"),
        (CONSTRUCTOR_FAILED, "formatted_exception_string"),
    ):
        if context in cause:
            return str(cause[context].get(key, "-"))
    return "-"


def google_style(name: str) -> str:
    """A resource name as Ray's node head answers it: `object_store_memory` is
    `objectStoreMemory`, `node:__internal_head__` is `node:InternalHead` (its `rest_response`
    camel-cases every key of the node summary)."""
    first, *tail = name.split("_")
    return first + "".join(part.capitalize() for part in tail)


def format_resources(resources: dict[str, float]) -> list[str]:
    """`0.0/1.0 CPU`, `0B/15.86GiB memory` lines, as Ray's autoscaler status prints totals (usage is
    not in the event stream, so 0: what a finished cluster shows)."""
    lines = []
    for name, total in sorted(resources.items()):
        if name.startswith("node:"):
            continue
        if name in ("memory", "object_store_memory"):
            lines.append(f"0B/{total / 2**30:.2f}GiB {name}")
        else:
            lines.append(f"0.0/{total} {name}")
    return lines


class RayDashboardViews:
    """The answers over a StoreViews (see the module doc)."""

    def __init__(self, views: StoreViews, session: str | None = None) -> None:
        self.views = views
        self.session = session  # the one session every answer is about (None: an empty store)
        self._routes: list[tuple[re.Pattern[str], Callable[..., Answer]]] = [
            (re.compile(r"/api/version"), self.version),
            (re.compile(r"/api/jobs/?"), self.jobs),
            (re.compile(r"/api/jobs/([^/]+)"), self.job),
            (re.compile(r"/api/jobs/([^/]+)/logs"), self.job_logs),
            (re.compile(r"/logical/actors"), self.actors),
            (re.compile(r"/logical/actors/([0-9a-fA-F]+)"), self.actor),
            (re.compile(r"/nodes"), self.nodes),
            (re.compile(r"/nodes/([0-9a-fA-F]+)"), self.node),
            (re.compile(r"/events"), self.events),
            (re.compile(r"/api/v0/cluster_events"), self.cluster_events),
            (re.compile(r"/api/v0/jobs"), self.list_jobs),
            (re.compile(r"/api/cluster_status"), self.cluster_status),
            (re.compile(r"/api/grafana_health"), self.grafana_health),
            (re.compile(r"/api/prometheus_health"), self.prometheus_health),
            (re.compile(r"/timezone"), self.timezone),
            (re.compile(r"/usage_stats_enabled"), self.usage_stats),
            (re.compile(r"/api/profiling_enabled"), self.profiling_enabled),
            (re.compile(r"/api/v0/cluster_metadata"), self.cluster_metadata),
            (re.compile(r"/api/v0/runtime_env_redaction"), self.runtime_env_redaction),
            (re.compile(r"/api/v0/platform_events"), self.not_found),
            (re.compile(r"/api/serve/applications/?"), self.serve_applications),
            (re.compile(r"/api/data/datasets/([^/]*)"), self.datasets),
            (re.compile(r"/api/train/v2/runs/v1"), self.train_runs),
            (re.compile(r"/api/train/v2/runs"), self.train_v1_runs),
            (re.compile(r"/api/v0/tasks/timeline"), self.timeline),
            (re.compile(r"/api/v0/logs"), self.list_logs),
            (re.compile(r"/api/v0/logs/(file|stream)"), self.log_file),
        ]

    def answer(self, path: str, params: Params, session: str | None = None) -> Answer | None:
        """The answer for a path this module knows, about `session` (else the newest); None for any
        other path (the state API's)."""
        for pattern, view in self._routes:
            match = pattern.fullmatch(path)
            if match:
                try:
                    scoped = RayDashboardViews(self.views, self.views.session_for(session))
                except BadRequest as exc:
                    return exc.status, state_query.envelope(None, ok=False, message=str(exc))
                return getattr(scoped, view.__name__)(params, *match.groups())  # type: ignore[no-any-return]
        return None

    def _rows(self, resource: str, *filters: tuple[str, str]) -> list[Row]:
        query = state_query.ListQuery(resource, ALL, True, False, [(k, "=", v) for k, v in filters])
        return state_query.select(
            self.views.store, query, order="start", descending=False, session=self.session
        ).rows

    def session_name(self) -> str:
        return self.session or self.views.session_name

    def _task_logs(self, task_id: str) -> list[dict[str, Any]]:
        return self.views.task_log_lines(task_id, None, self.session)

    # -- jobs --------------------------------------------------------------------------------

    def version(self, _: Params) -> Answer:
        return 200, {
            "version": "4",
            "ray_version": RAY_VERSION,
            "ray_commit": "ray-otel-events",
            "session_name": self.session_name(),
        }

    def _job_details(self, jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Job rows completed as Ray's job head answers them: a submitted job's times are its
        supervisor actor's (submitted, ended), the driver's IP is its node's, and only a
        submitted job names the driver's node."""
        supervisors = {
            row.get("name", "")[len(SUPERVISOR_PREFIX) :]: row
            for row in self._rows(ACTORS, ("class_name", SUPERVISOR_CLASS))
            if row.get("name", "").startswith(SUPERVISOR_PREFIX)
        }
        ips = self._node_ips()
        for job in jobs:
            driver = job.get("driver_info")
            if driver and not driver.get("node_ip_address"):
                driver["node_ip_address"] = ips.get(job.get("driver_node_id") or "", "")
            if job.get("type") == "DRIVER" and "driver_node_id" in job:
                job["driver_node_id"] = None  # Ray's job table has it of submitted jobs only
            supervisor = supervisors.get(job.get("submission_id") or "")
            if supervisor is None:
                continue
            events = supervisor.get("events") or []
            if "start_time" in job and events:
                job["start_time"] = events[0]["created_ms"]
            ended = _first_ms(supervisor, "DEAD")
            if "end_time" in job and ended is not None and job.get("status") in _ENDED:
                job["end_time"] = ended
        return jobs

    def _jobs(self) -> list[dict[str, Any]]:
        """The driver jobs, each submitted one completed by its EXPORT_SUBMISSION_JOB (status,
        message, exit code, times: the job table's), and the submissions no driver registered
        for (an entrypoint that failed before `ray.init()`), as Ray's job head lists them."""
        jobs = self._job_details([state_query.shape(JOBS, row, detail=True) for row in self._rows(JOBS)])
        submitted = {
            job["submission_id"]: job
            for job in map(
                ray_export_views.submitted_job, self.views.store.export_entities(SUBMISSION_JOB, self.session)
            )
        }
        for job in jobs:
            known = submitted.pop(job.get("submission_id") or "", None)
            if known is not None:
                job.update({k: v for k, v in known.items() if k not in ("type", "job_id", "driver_info")})
        return [*submitted.values(), *jobs]

    def jobs(self, _: Params) -> Answer:
        """JobDetails of every job, as `/api/jobs/` lists them (and `ray job list` reads them)."""
        return 200, self._jobs()

    def list_jobs(self, params: Params) -> Answer:
        """`ray list jobs`: the state API's list, each job completed as `/api/jobs/` completes it."""
        status, body = self.views.answer("/api/v0/jobs", params, self.session)
        if status == 200:
            self._job_details(body["data"]["result"]["result"])
        return status, body

    def job(self, _: Params, job_or_submission_id: str) -> Answer:
        """One job by submission id, else by job id (Ray's job head tries both)."""
        jobs = self._jobs()
        for key in ("submission_id", "job_id"):
            for job in jobs:
                if job.get(key) == job_or_submission_id:
                    return 200, job
        return 404, f"Job {job_or_submission_id} does not exist"

    def job_logs(self, params: Params, job_or_submission_id: str) -> Answer:
        """`ray job logs`: Ray keeps a submitted job's driver output in a file on its head node,
        which the event stream does not carry: the file as `ray-otel-events collect` shipped it,
        else an answer saying it was not collected, in the logs Ray's CLI prints. A driver's own
        job has none in Ray either."""
        status, job = self.job(params, job_or_submission_id)
        if status != 200:
            return status, job
        if job.get("type") != "SUBMISSION":
            return 400, "Can only get logs of submission type jobs"
        collected = self._collected(
            None, f"job-driver-{job.get('submission_id') or job_or_submission_id}.log"
        )
        if collected is not None:
            return 200, {"logs": collected}
        return 200, {"logs": DRIVER_LOGS_NOT_COLLECTED.format(job=job_or_submission_id)}

    def _job_events(self) -> list[dict[str, Any]]:
        """The events Ray's job manager logs for a submitted job (`job_manager.py`): started when
        submitted, completed with its status when it ended; from the host of its driver's node."""
        hosts = {r["node_id"]: r.get("hostname") or r.get("node_ip", "") for r in self._rows(NODES)}
        events = []
        for job in self._jobs():
            submission = job.get("submission_id")
            if not submission:
                continue
            happened = [(job.get("start_time"), "INFO", f"Started a ray job {submission}.")]
            if job.get("status") in _ENDED:
                severity = "ERROR" if job["status"] == "FAILED" else "INFO"
                message = f"Completed a ray job {submission} with a status {job['status']}."
                happened.append((job.get("end_time"), severity, message))
            for ms, severity, message in happened:
                events.append(
                    {
                        "eventId": hashlib.sha1(message.encode()).hexdigest()[:36],
                        "sourceType": "JOBS",
                        "sourceHostname": hosts.get(job.get("driver_node_id") or "", ""),
                        "message": message,
                        "timestamp": str((ms or 0) // 1000),
                        "customFields": {"submissionId": submission},
                        "severity": severity,
                        "label": "",
                    }
                )
        return events

    # -- actors ------------------------------------------------------------------------------

    def _workers_by_pid(self) -> dict[tuple[str, int], Row]:
        return {(w.get("node_id") or "", w.get("pid") or 0): w for w in self._rows(WORKERS)}

    def _actor(self, row: Row, workers: dict[tuple[str, int], Row], nodes: dict[str, Row]) -> dict[str, Any]:
        """The node head's actor dict (its `_actor_table_data_to_dict` plus DataOrganizer's extras)."""
        node_id = row.get("node_id") or ""
        pid = row.get("pid")
        worker = workers.get((node_id, pid or 0), {})
        start = _first_ms(row, "ALIVE") or 0
        # the first death: a dead actor's record is written again when its job ends
        end = (_first_ms(row, "DEAD") or 0) if row.get("state") == "DEAD" else 0
        events = row.get("events") or []
        return {
            "actorId": row.get("actor_id"),
            "jobId": row.get("job_id"),
            "placementGroupId": row.get("placement_group_id"),
            "address": {
                "nodeId": node_id,
                "ipAddress": (nodes.get(node_id) or {}).get("node_ip", ""),
                "port": 0,
                "workerId": worker.get("worker_id", ""),
            },
            "className": row.get("class_name", ""),
            "actorClass": row.get("class_name", ""),
            "state": row.get("state", "DEPENDENCIES_UNREADY"),
            "numRestarts": str(row.get("num_restarts", 0)),
            "name": row.get("name", ""),
            "timestamp": float(events[-1]["created_ms"] if events else 0),
            "pid": pid,
            "startTime": start,
            "endTime": end,
            "reprName": row.get("repr_name") or "",
            "labelSelector": row.get("label_selector") or {},
            "exitDetail": exit_detail(row.get("death_cause")),
            "requiredResources": requested_resources(row.get("required_resources") or {}),
            "callSite": row.get("call_site"),
            "gpus": [],
            "tpus": [],
            "processStats": None,
            "mem": [],
        }

    def _actors(self, *filters: tuple[str, str]) -> dict[str, dict[str, Any]]:
        workers = self._workers_by_pid()
        nodes = {n["node_id"]: n for n in self._rows(NODES)}
        return {row["actor_id"]: self._actor(row, workers, nodes) for row in self._rows(ACTORS, *filters)}

    def actors(self, params: Params) -> Answer:
        actors = self._actors()
        if params.get("ids"):  # Ray answers null for an id it does not know
            return 200, rest(
                "All actors fetched.", actors={i: actors.get(i) for i in params["ids"].split(",")}
            )
        return 200, rest("All actors fetched.", actors=actors)

    def actor(self, _: Params, actor_id: str) -> Answer:
        found = self._actors(("actor_id", actor_id.lower()))
        return 200, rest("Actor details fetched.", detail=found.get(actor_id.lower()))

    # -- nodes -------------------------------------------------------------------------------

    def _node(self, row: Row) -> dict[str, Any]:
        """The node head's node info: GcsNodeInfo under `raylet`; the physical stats (CPU, memory,
        disks) the reporter agent polls are not in the event stream, so they are left out or 0."""
        node_id = row.get("node_id", "")
        resources = row.get("resources_total") or {}
        ip = row.get("node_ip", "")
        hostname = row.get("hostname") or row.get("node_name") or ip
        state = row.get("state", "ALIVE")
        raylet = {
            "nodeId": node_id,
            "nodeManagerAddress": ip,
            "nodeManagerHostname": hostname,
            "nodeName": row.get("node_name", ip),
            "isHeadNode": bool(row.get("is_head_node")),
            "state": state,
            "stateMessage": row.get("state_message"),
            "resourcesTotal": {google_style(k): v for k, v in resources.items()},
            "labels": row.get("labels") or {},
            "startTimeMs": str(row.get("start_time_ms") or 0),
            "endTimeMs": str(row.get("end_time_ms") or 0),
            "objectStoreUsedMemory": 0,
            "objectStoreAvailableMemory": int(resources.get("object_store_memory", 0)),
            "coreWorkersStats": [],
        }
        return {
            "hostname": hostname,
            "ip": ip,
            "cpu": 0,
            "cpus": [int(resources.get("CPU", 0))] * 2,
            "networkSpeed": [0, 0],
            "loadAvg": [[0, 0, 0], [0, 0, 0]],
            "bootTime": (row.get("start_time_ms") or 0) / 1000,
            "gpus": [],
            "tpus": [],
            "raylet": raylet,
        }

    @staticmethod
    def _worker(row: Row, node_ip: str) -> dict[str, Any]:
        """A worker process as the node page lists it: its ids, pid and start from the stream; its
        live stats (command line, CPU, memory) are not recorded."""
        return {
            "pid": row.get("pid"),
            "createTime": (row.get("start_time_ms") or row.get("worker_launched_time_ms") or 0) / 1000,
            "cmdline": [f"ray::{row.get('worker_type', 'WORKER')}"],
            "cpuPercent": 0,
            "cpuTimes": {},
            "memoryInfo": {},
            "language": "PYTHON",
            "coreWorkerStats": [
                {
                    "workerId": row.get("worker_id"),
                    "ipAddress": row.get("ip") or node_ip,
                    "pid": row.get("pid"),
                }
            ],
        }

    def nodes(self, params: Params) -> Answer:
        view = params.get("view")
        rows = self._rows(NODES)
        if view == "summary":
            return 200, rest(
                "Node summary fetched.",
                summary=[self._node(row) for row in rows],
                nodeLogicalResources={
                    row["node_id"]: "\n".join(format_resources(row.get("resources_total") or {}))
                    for row in rows
                },
            )
        if (view or "").lower() == "hostnamelist":
            alive = sorted(
                {r.get("hostname") or r.get("node_name", "") for r in rows if r.get("state") == "ALIVE"}
            )
            return 200, rest("Node hostname list fetched.", hostNameList=alive)
        return 400, rest(f"Unknown view {view}", ok=False)

    def node(self, _: Params, node_id: str) -> Answer:
        rows = self._rows(NODES, ("node_id", node_id.lower()))
        if not rows:
            return 200, rest("Node details fetched.", detail={"raylet": {}, "actors": {}, "workers": []})
        info = self._node(rows[0])
        info["actors"] = self._actors(("node_id", node_id.lower()))
        # Ray's page lists a node's running processes (and marks each ALIVE): the workers the
        # stream last saw alive, none once their cluster is gone
        workers = self._rows(WORKERS, ("node_id", node_id.lower()))
        info["workers"] = [self._worker(w, info["ip"]) for w in workers if w.get("is_alive")]
        return 200, rest("Node details fetched.", detail=info)

    def cluster_status(self, _: Params) -> Answer:
        """The autoscaler's text status (`ray status`), from the stored nodes."""
        rows = self._rows(NODES)
        alive = [r for r in rows if r.get("state") == "ALIVE"]
        dead = [r for r in rows if r.get("state") == "DEAD"]
        totals: dict[str, float] = {}
        for row in alive or rows:
            for name, value in (row.get("resources_total") or {}).items():
                totals[name] = totals.get(name, 0) + value
        bar = "-" * 63
        lines = [
            f"======== Autoscaler status: from the store, session {self.session_name()} ========",
            "Node status",
            bar,
            "Active:",
            *([f" 1 node_{r['node_id']}" for r in alive] or [" (no active nodes)"]),
            "Pending:",
            " (no pending nodes)",
            "Recent failures:",
            *([f" node_{r['node_id']}: DEAD" for r in dead] or [" (no failures)"]),
            "",
            "Resources",
            bar,
            "Total Usage:",
            *[f" {line}" for line in format_resources(totals)],
            "",
            "From request_resources:",
            " (none)",
            "Pending Demands:",
            " (no resource demands)",
        ]
        return 200, rest("Got formatted cluster status.", clusterStatus="\n".join(lines))

    # -- what the store has nothing to say about ----------------------------------------------

    def events(self, params: Params) -> Answer:
        """Ray's event head's events by job (the Overview's Events card): Ray reads them from its
        nodes' event files; here the submitted jobs' start and end, which Ray files under
        "global" (they carry a submission id, no job id), are made from the stored jobs."""
        job_id = params.get("job_id")
        events = self._job_events()
        if job_id is None:
            return 200, rest("All events fetched.", events={"global": events} if events else {})
        return 200, rest("Job events fetched.", jobId=job_id, events=events if job_id == "global" else [])

    def cluster_events(self, params: Params) -> Answer:
        """`ray list cluster-events`: the same events as the state API lists them."""
        rows = [
            {
                "severity": event["severity"],
                "time": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(int(event["timestamp"]))),
                "source_type": event["sourceType"],
                "message": event["message"],
                "event_id": event["eventId"],
            }
            for event in self._job_events()
        ]
        try:
            limit = int(params.get("limit", "100"))
        except ValueError:
            return 400, state_query.envelope(None, ok=False, message="limit must be an integer")
        return 200, state_query.envelope(
            {
                "total": len(rows),
                "num_after_truncation": len(rows),
                "num_filtered": len(rows),
                "result": rows[:limit],
                "partial_failure_warning": "",
                "warnings": None,
            }
        )

    def grafana_health(self, _: Params) -> Answer:
        return 500, rest("Grafana healthcheck failed", ok=False, exception=f"Grafana is {NOT_RECORDED}")

    def prometheus_health(self, _: Params) -> Answer:
        return 500, rest("prometheus healthcheck failed.", ok=False, reason=f"Prometheus is {NOT_RECORDED}")

    def timezone(self, _: Params) -> Answer:
        """This machine's zone, as Ray's head answers with its own."""
        offset = time.strftime("%z")
        return 200, {"offset": f"{offset[:3]}:{offset[3:]}", "value": config.timezone_name()}

    def usage_stats(self, _: Params) -> Answer:
        return 200, rest(
            "Fetched usage stats enabled", usageStatsEnabled=False, usageStatsPromptEnabled=False
        )

    def profiling_enabled(self, _: Params) -> Answer:
        """Profiling attaches to live processes: never, for stored ones."""
        return 200, rest("", profilingEnabled=False, profilingDefaults=_PROFILING_DEFAULTS)

    def cluster_metadata(self, _: Params) -> Answer:
        return 200, rest("", rayVersion=RAY_VERSION, pythonVersion="", rayInitCluster=False)

    def runtime_env_redaction(self, _: Params) -> Answer:
        return 200, rest("", redactionEnabled=True)

    def not_found(self, _: Params) -> Answer:
        return 404, "404: Not Found"

    def serve_applications(self, _: Params) -> Answer:
        return 501, f"Ray Serve is {NOT_RECORDED}."

    def datasets(self, _: Params, job_id: str) -> Answer:
        """Ray Data's datasets of a job, from the Export API events the collector shipped
        (`ray_export_views`)."""
        finished: dict[str, int] = {}
        for job, name, state, count in self.views.store.counts(
            TASKS, "job", "name", "state", session=self.session
        ):
            if job == job_id and state == "FINISHED":
                finished[name] = finished.get(name, 0) + int(count)
        entities = self.views.store.export_entities(DATASET, self.session)
        return 200, ray_export_views.datasets_answer(entities, job_id, lambda name: finished.get(name, 0))

    def train_v1_runs(self, _: Params) -> Answer:
        """Ray 2.60's `/api/train/v2/runs` is Train v1's (its stats actor), which writes no event:
        answered as the live dashboard answers where no Train v1 run is (Train v2's are under
        `/v1`)."""
        return 500, TRAIN_V1_ABSENT

    def train_runs(self, _: Params) -> Answer:
        """Train v2's runs (the live dashboard's `/api/train/v2/runs/v1`), with their attempts,
        workers and jobs."""
        store = self.views.store
        dead = {row.get("actor_id", "") for row in self._rows(ACTORS, ("state", "DEAD"))}
        jobs = {job["job_id"]: job for job in self._jobs() if job.get("job_id")}
        return 200, ray_export_views.train_runs_answer(
            store.export_entities(TRAIN_RUN, self.session),
            store.export_entities(TRAIN_RUN_ATTEMPT, self.session),
            jobs,
            dead,
        )

    def timeline(self, params: Params) -> Answer:
        """`ray timeline`'s Chrome trace: Ray builds it from profile events; in a store with none,
        each attempt's running span stands in as one slice."""
        filters = [("job_id", params["job_id"])] if params.get("job_id") else []
        rows = [r for r in self._rows(TASKS, *filters) if r.get("type") != "DRIVER_TASK"]
        return 200, ray_chrome_trace(rows, self._node_ips())

    def _node_ips(self) -> dict[str, str]:
        return {r["node_id"]: r.get("node_ip", "") for r in self._rows(NODES)}

    # -- logs ----------------------------------------------------------------------------------

    def _collected(self, node_id: str | None, filename: str) -> str | None:
        """A log file `ray-otel-events collect` shipped from the node (any node: None), as text."""
        if self.session is None:
            return None
        store = self.views.store
        nodes = [node_id] if node_id else [n for n, f, _ in store.log_files(self.session) if f == filename]
        for node in nodes:
            found = store.log_file(self.session, node, filename, MAX_SERVED_BYTES)
            if found is not None:
                return found.decode("utf-8", "replace")
        return None

    def list_logs(self, params: Params) -> Answer:
        """A node's log files: those `ray-otel-events collect` shipped, grouped as Ray groups them,
        and one `worker-<id>-<job>-<pid>.out/.err` per other worker with stored lines."""
        node_id, node_ip = params.get("node_id"), params.get("node_ip")
        if not node_id and not node_ip:
            return 400, state_query.envelope(
                None,
                ok=False,
                message="Both node id and node ip are not provided. Please provide at least one of them.",
            )
        if not node_id:
            node_id = next((n for n, ip in self._node_ips().items() if ip == node_ip), None)
            if node_id is None:
                return 404, state_query.envelope(
                    None, ok=False, message=f"Cannot find matching node_id for a given node ip {node_ip}"
                )
        glob = params.get("glob") or "*"
        collected = (
            [f for _, f, _ in self.views.store.log_files(self.session, node_id.lower())]
            if self.session
            else []
        )
        names = [f for f in collected if fnmatch.fnmatch(f, glob)]
        for name, streams in self._worker_streams(node_id).items():
            for suffix in ("out", "err"):
                file = f"{name}.{suffix}"
                if set(_STREAMS[suffix]) & streams and fnmatch.fnmatch(file, glob) and file not in collected:
                    names.append(file)
        files: dict[str, list[str]] = {"worker_out": [], "worker_err": []}
        for name in names:
            files.setdefault(log_category(name), []).append(name)
        return 200, state_query.envelope(files)

    def _worker_streams(self, node_id: str) -> dict[str, set[str]]:
        """`worker-<id>-<job>-<pid>` of the node's workers, with the streams their lines came on."""
        found: dict[str, set[str]] = {}
        pids = self._worker_pids(node_id)
        for task in self._rows(TASKS, ("node_id", node_id.lower())):
            lines = self._task_logs(task["task_id"])
            if not lines or not task.get("worker_id"):
                continue
            pid = pids.get(task["worker_id"]) or task.get("worker_pid") or 0
            name = f"worker-{task['worker_id']}-{task.get('job_id', 'ffffffff')}-{pid}"
            found.setdefault(name, set()).update(line.get("stream", "log") for line in lines)
        return found

    def _worker_pids(self, node_id: str) -> dict[str, int]:
        """Worker id to pid from the node's worker rows (GCS sends them when a worker registers). A
        task's own pid comes only in its executing worker's RUNNING event, which Ray flushes on the
        worker's timer and drops when its call to the aggregator fails, so a task can lack it."""
        return {
            w["worker_id"]: int(w["pid"])
            for w in self._rows(WORKERS, ("node_id", node_id.lower()))
            if w.get("pid")
        }

    def log_file(self, params: Params, _media: str) -> Answer:
        """A task's (or an actor's, a worker pid's on a node, a listed worker file's) stored log
        lines as text, where Ray streams the part of the worker's file the task wrote. Stored lines
        carry no attempt number, so a retried task's lines are those of all its attempts."""
        suffix = params.get("suffix", "out")
        if suffix not in _STREAMS:
            return 400, f"suffix must be out or err, got {suffix!r}"
        try:
            int(params.get("attempt_number", "0"))
            limit = int(params.get("lines", "1000"))
        except ValueError:
            return 400, "attempt_number and lines must be integers"
        worker_file = _WORKER_FILE.fullmatch(params.get("filename") or "")
        collected = (
            self._collected(self._node_of(params), params["filename"])
            if params.get("filename") and not params.get("task_id") and not params.get("actor_id")
            else None
        )
        if collected is not None:  # a file the collector shipped: as Ray's agent serves it
            return 200, _tail(collected, limit, params.get("filter_ansi_code", "").lower() == "true")
        if params.get("task_id"):
            tasks = [params["task_id"].lower()]
            if not self.views.store.entity_rows(TASKS, tasks[0], self.session):
                return 404, f"Could not find the task {params['task_id']}"
        elif params.get("actor_id"):
            actor_id = params["actor_id"].lower()
            # its constructor's task id is the actor's, after a nil task part
            methods = self._rows(TASKS, ("actor_id", actor_id))
            tasks = [NIL_ID[:16] + actor_id, *(t["task_id"] for t in methods)]
        elif params.get("pid"):
            if not params["pid"].isdigit():
                return 400, f"pid must be an integer, got {params['pid']!r}"
            node = (params.get("node_id") or "").lower() or next(
                (n for n, ip in self._node_ips().items() if ip == params.get("node_ip")), ""
            )
            workers = [  # a pid is a worker's on one node (a row with no node stored could be any)
                w["worker_id"]
                for w in self._rows(WORKERS, ("pid", params["pid"]))
                if not node or w.get("node_id") in (None, "", node)
            ]
            tasks = [
                t["task_id"]
                for t in self._rows(TASKS, ("worker_pid", params["pid"]))
                if not node or t.get("node_id") in (None, "", node)
            ] + [t["task_id"] for worker in workers for t in self._rows(TASKS, ("worker_id", worker))]
        elif worker_file:
            worker, _job, _pid, suffix = worker_file.groups()
            tasks = [t["task_id"] for t in self._rows(TASKS, ("worker_id", worker))]
        elif driver_log := _DRIVER_LOG.fullmatch(params.get("filename") or ""):
            return 200, DRIVER_LOGS_NOT_COLLECTED.format(job=driver_log[1])  # the job page's "Driver logs"
        elif params.get("filename"):
            return 404, f"{params['filename']} is {NOT_RECORDED}; only workers' task output is kept"
        else:
            return 400, "one of task_id, actor_id, pid or filename is required"
        lines = [
            line
            for task_id in dict.fromkeys(tasks)
            for line in self._task_logs(task_id)
            if line.get("stream", "log") in _STREAMS[suffix]
        ]
        lines.sort(key=lambda line: line.get("ts_ns", 0))
        texts = [str(line.get("body", "")).rstrip("\n") for line in lines]
        if not texts and suffix == "err" and params.get("actor_id"):
            texts = self._constructor_failure(params["actor_id"].lower())
        if params.get("filter_ansi_code", "").lower() == "true":
            texts = [_ANSI.sub("", text) for text in texts]
        if limit >= 0:
            texts = texts[-limit:] if limit else []
        return 200, "".join(text + "\n" for text in texts)

    def _node_of(self, params: Params) -> str | None:
        """The node a request names, by id or IP (None: any)."""
        if params.get("node_id"):
            return str(params["node_id"]).lower()
        if params.get("node_ip"):
            return next((n for n, ip in self._node_ips().items() if ip == params["node_ip"]), None)
        return None

    def _constructor_failure(self, actor_id: str) -> list[str]:
        """What an actor whose constructor raised wrote to its stderr, as Ray's worker prints it,
        from the traceback its death cause keeps (for when its worker's lines were not sent)."""
        rows = self._rows(ACTORS, ("actor_id", actor_id))
        failure = ((rows[0].get("death_cause") or {}) if rows else {}).get(CONSTRUCTOR_FAILED) or {}
        traceback = str(failure.get("formatted_exception_string") or "")
        if not traceback:
            return []
        _, found, last = traceback.rpartition(_ACTOR_DIED)
        return f"Exception raised in creation task: {last if found else traceback}".rstrip("\n").split("\n")


def log_category(name: str) -> str:
    """The group Ray's Logs page shows a file under (LogsManager._categorize_log_files, Ray 2.60)."""
    if "worker" in name and name.endswith(".out"):
        return "worker_out"
    if "worker" in name and name.endswith(".err"):
        return "worker_err"
    for marker, category in (
        ("core-worker", "core_worker"),
        ("core-driver", "driver"),
    ):
        if marker in name and name.endswith(".log"):
            return category
    for marker, category in (
        ("raylet.", "raylet"),
        ("gcs_server.", "gcs_server"),
        ("log_monitor", "internal"),
        ("monitor", "autoscaler"),
        ("agent.", "agent"),
        ("dashboard.", "dashboard"),
    ):
        if marker in name:
            return category
    return "internal"


def _tail(text: str, limit: int, filter_ansi: bool) -> str:
    """The last `limit` lines of a file (all when negative), as Ray's agent streams them."""
    if filter_ansi:
        text = _ANSI.sub("", text)
    if limit < 0:
        return text
    lines = text.splitlines(keepends=True)
    return "".join(lines[-limit:]) if limit else ""


def ray_chrome_trace(rows: list[Row], node_ips: dict[str, str]) -> list[dict[str, Any]]:
    """Ray's `chrome_tracing_dump` shape: a process per node IP, a thread per worker, `X` slices
    whose args carry the task's ids; metadata events last. An attempt's running span stands in
    for its slice only in a store with no profile events (Ray's aggregator not told to export
    them): where there are some, an attempt without them has no slice, as in Ray's own trace."""
    profiled = any((row.get("profiling_data") or {}).get("events") for row in rows)
    events: list[dict[str, Any]] = []
    nodes: dict[str, int] = {}
    workers: dict[tuple[int, str], int] = {}
    for row in rows:
        ids = {
            "task_id": row.get("task_id"),
            "job_id": row.get("job_id"),
            "attempt_number": row.get("attempt_number", 0),
            "func_or_class_name": row.get("func_or_class_name"),
            "actor_id": row.get("actor_id"),
        }
        profiling = row.get("profiling_data") or {}
        slices: list[tuple[str, str, float, float, dict[str, Any]]] = []
        for event in profiling.get("events") or []:
            extra = dict(event.get("extra_data") or {})
            name = str(extra.get("name", event.get("event_name", "")))
            slices.append((event.get("event_name", ""), name, event["start_time"], event["end_time"], extra))
        if not slices and not profiled and row.get("start_time_ms") is not None:
            end = row.get("end_time_ms") or row["start_time_ms"]
            name = row.get("func_or_class_name") or row.get("name") or "task"
            slices.append((f"task::{name}", name, row["start_time_ms"], end, {"name": name}))
        if not slices:
            continue
        ip = profiling.get("node_ip_address") or node_ips.get(row.get("node_id") or "", "") or "unknown"
        kind = profiling.get("component_type", "worker")
        component = f"{kind}:{profiling.get('component_id') or row.get('worker_id') or NIL_ID}"
        pid = nodes.setdefault(ip, len(nodes))
        tid = workers.setdefault((pid, component), len(workers))
        for category, name, start, end, extra in slices:
            events.append(
                {
                    "cat": category,
                    "name": name,
                    "pid": pid,
                    "tid": tid,
                    "ts": start * 1e3,
                    "dur": end * 1e3 - start * 1e3,
                    "cname": _TRACE_COLOURS.get(category, "generic_work"),
                    "args": {**extra, **ids},
                    "ph": "X",
                }
            )
    events += [
        {"name": "process_name", "ph": "M", "pid": i, "args": {"name": f"Node {ip}"}}
        for ip, i in nodes.items()
    ]
    events += [
        {"name": "thread_name", "ph": "M", "tid": i, "pid": pid, "args": {"name": component}}
        for (pid, component), i in workers.items()
    ]
    return events
