"""The attribute names raysight puts on spans and their resources, so that a span leads to its task, worker and logs:
written by the instrumentation, read by the receiver. Ray's IDs are hex, as Ray's CLI and raysight show them."""

SESSION = "ray.session_name"
JOB_ID = "ray.job_id"
NODE_ID = "ray.node_id"
WORKER_ID = "ray.worker_id"
PID = "process.pid"  # OpenTelemetry's own
TASK_ID = "ray.task_id"
ATTEMPT = "ray.task.attempt"
ACTOR_ID = "ray.actor_id"
FUNCTION = "ray.function"  # module.qualname of the task's function, or Class.method
TASK_KIND = "ray.task.kind"  # "task", "actor_task" or "actor_creation"
SERVE_REQUEST_ID = "ray.serve.request_id"

TASK_SCOPE = "raysight.ray"  # the instrumentation scope of raysight's span of each task attempt
