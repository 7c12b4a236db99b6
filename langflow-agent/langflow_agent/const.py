"""Langflow names: endpoints, stream event names and the state key."""

PLATFORM = "Langflow"
SESSION_KEY = "langflow.session_id"

API_PREFIX = "/api/v1"
RUN_PATH = "/api/v1/run/{flow}"
FLOW_PATH = "/api/v1/flows/{flow}"
UPLOAD_PATH = "/api/v2/files"

# a session id we mint per LangBot conversation (or person): never the flow id, which Langflow
# would otherwise use and so share one chat memory between every caller
SESSION_PREFIX = "langbot-"

CHAT_INPUT_TYPE = "ChatInput"

# /run?stream=true events that carry nothing a chat user sees
IGNORED_EVENTS = frozenset(
    {"end_vertex", "build_start", "build_end", "log", "vertices_sorted", "remove_message", "output"}
)
