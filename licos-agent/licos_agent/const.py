"""LICOS agent runtime names: paths, headers, stream event types, error codes and the state key."""

PLATFORM = "LICOS"
SESSION_KEY = "licos.session_id"

STREAM_PATH = "/stream_run"
CANCEL_PATH = "/cancel/{run_id}"
EVENTS_PATH = "/agent/v1/runs/{run_id}/events"  # managed (events-v1) replay: ?after=N
RUN_RECORD_PATH = "/run_records/{run_id}"
# managed (agent_runtime) routes, agent_routes.py: the run's record ({"status": "running", …}) and
# deleting a session with its history, checkpoints and runs (agent_sessions.py AgentSessions.delete)
RUN_PATH = "/agent/v1/runs/{run_id}"
SESSION_PATH = "/agent/v1/sessions/{session_id}"

# pasted API paths cut off base-url (the service root is what every route hangs off)
URL_SUFFIXES = ("/stream_run", "/run", "/agent/v1", "/v1/chat/completions", "/v1")

RUN_ID_HEADER = "X-Run-Id"  # the runtime adopts a caller-chosen run id (context.py: ctx.run_id)
ORG_HEADER = "X-Licos-Current-Org-Id"
DEFAULT_USER_HEADER = "X-Licos-Current-User-Id"
RESUME_HEADER = "x-licos-stream-resume"  # "events-v1" on a managed stream

PROTOCOLS = ("legacy", "managed")
HISTORY_SOURCES = ("service", "langbot")
DEFAULT_HISTORY_TURNS = 10
MAX_HISTORY_TURNS = 50
MAX_RESUMES = 3

# stream_protocol.py error codes
MODEL_FAILURE = "105000"
TIMEOUT_FAILURE = "105001"
PARAM_FAILURE = "105002"  # the attachment (upload_file) could not be used, or a bad parameter

# managed run statuses (managed_agents.py)
TERMINAL = frozenset({"completed", "failed", "cancelled", "interrupted", "expired"})
WAITING = frozenset({"waiting_input", "waiting_approval", "paused"})

BASE_URL_HINT = "is base-url the root of the LICOS agent service, e.g. http://127.0.0.1:8000?"
APPROVALS_PATH = "/agent/approvals/{run_id}"
