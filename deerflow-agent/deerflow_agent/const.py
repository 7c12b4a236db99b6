"""DeerFlow / LangGraph Platform names: API prefixes, paths, stream modes and the state key."""

PLATFORM = "DeerFlow"
SESSION_KEY = "deerflow.thread_id"

# Where the LangGraph-compatible API lives under a server root, in the order a bare root is probed:
# DeerFlow behind its nginx (port 2026), a plain LangGraph server (`langgraph dev`, no prefix), the
# DeerFlow gateway itself (port 8001).
NGINX_PREFIX = "/api/langgraph"
GATEWAY_PREFIX = "/api"
PROBE_ORDER = (NGINX_PREFIX, "", GATEWAY_PREFIX)

THREADS_PATH = "/threads"
THREAD_PATH = "/threads/{thread_id}"  # DELETE: LangGraph 204, DeerFlow 200 (409 while a run is in flight)
RUN_STREAM_PATH = "/threads/{thread_id}/runs/stream"
CANCEL_PATH = "/threads/{thread_id}/runs/{run_id}/cancel"
RUN_PATH = "/threads/{thread_id}/runs/{run_id}"  # the run's status
# join a run's stream again (both servers; Last-Event-ID replays what came after that event)
JOIN_PATH = "/threads/{thread_id}/runs/{run_id}/stream"
STATE_PATH = "/threads/{thread_id}/state"  # what the thread waits on (its interrupts)
# conversation state, per session like the thread id: the interrupt waiting for its asker's answer
PENDING_KEY = "deerflow.pending-interrupt"
# DeerFlow only (gateway route, also reachable through nginx): files into the thread's workspace
UPLOAD_PATH = "/api/threads/{thread_id}/uploads"
# DeerFlow only: a file the agent presented (values.artifacts holds its virtual path, which follows)
ARTIFACTS_PATH = "/api/threads/{thread_id}/artifacts"
ARTIFACT_ROOT = "/mnt/user-data/"  # every virtual path in a DeerFlow thread's workspace starts so
# the longest fetching one answer's files may take in all (a link may point to any public server,
# one that sends a byte now and then too): what is not in by then is named, and the answer stands
ARTIFACT_SECONDS = 30.0

# a cut stream is joined again after these pauses (seconds): this many times in a row without a
# new event, MAX_REJOINS times in all (a long run behind a proxy that cuts every long stream)
REJOIN_DELAYS = (0.0, 0.25, 0.5)
MAX_REJOINS = 20
# run statuses (LangGraph and DeerFlow) of a run that is still going
RUN_GOING = frozenset({"pending", "running"})

# what the plugin sets in the run's context itself (its own fields), and what the servers own:
# neither may come from extra-configurable
OWN_KEYS = frozenset({"thinking_enabled", "is_plan_mode", "subagent_enabled", "max_concurrent_subagents",
                      "model_name", "model"})
SERVER_KEYS = frozenset({"thread_id", "run_id", "user_id", "checkpoint_id", "checkpoint_ns", "assistant_id",
                         "graph_id", "is_internal", "authz_attributes", "channel_user_id", "non_interactive"})

# every one is in DeerFlow's allowed list (it rejects plain "messages"); LangGraph accepts them all
STREAM_MODES = ["values", "messages-tuple", "updates", "custom"]

DEFAULT_ASSISTANT = "lead_agent"
DEFAULT_RECURSION_LIMIT = 1000
DEFAULT_MAX_SUBAGENTS = 3

BASE_URL_HINT = (
    "is api-base the DeerFlow address (http://host:2026), its LangGraph API (…/api/langgraph), the gateway "
    "(http://host:8001/api) or a LangGraph server root?"
)

# DeerFlow subagent progress written through the stream writer (custom mode)
TASK_END = {
    "task_completed": None,
    "task_failed": "failed",
    "task_cancelled": "cancelled",
    "task_timed_out": "timed out",
}

# stream events with nothing for the chat
IGNORED_EVENTS = frozenset(
    {"messages/metadata", "debug", "tasks", "checkpoints", "events", "feedback", "heartbeat"}
)
