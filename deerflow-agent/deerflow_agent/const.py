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
RUN_STREAM_PATH = "/threads/{thread_id}/runs/stream"
CANCEL_PATH = "/threads/{thread_id}/runs/{run_id}/cancel"
STATE_PATH = "/threads/{thread_id}/state"  # what the thread waits on (its interrupts)
# conversation state, per session like the thread id: the interrupt waiting for its asker's answer
PENDING_KEY = "deerflow.pending-interrupt"
# DeerFlow only (gateway route, also reachable through nginx): files into the thread's workspace
UPLOAD_PATH = "/api/threads/{thread_id}/uploads"

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
    {"messages/metadata", "debug", "tasks", "checkpoints", "events", "gap", "feedback", "heartbeat"}
)
