"""Langflow names: endpoints, stream event names and the state key."""

PLATFORM = "Langflow"
SESSION_KEY = "langflow.session_id"

API_PREFIX = "/api/v1"
RUN_PATH = "/api/v1/run/{flow}"
FLOW_PATH = "/api/v1/flows/{flow}"  # a flow by its UUID only (an endpoint name is a 422)
FLOWS_PATH = "/api/v1/flows/"  # the key owner's flows (``header_flows=true``: id, name, endpoint_name, …)
# files other than images: the key owner's "My Files" (Langflow's docs: v2 takes no images)
UPLOAD_PATH = "/api/v2/files"
FILE_DELETE_PATH = "/api/v2/files/{id}"
# images: stored beside the flow (``<flow id>/<timestamp>_<name>``), the route Langflow's docs name for images
IMAGE_UPLOAD_PATH = "/api/v1/files/upload/{flow}"
IMAGE_DELETE_PATH = "/api/v1/files/delete/{flow}/{name}"
# the stored messages of one session, i.e. the flow's chat memory for it (204, also when there were none)
SESSION_MESSAGES_PATH = "/api/v1/monitor/messages/session/{session}"

# a session id we mint per LangBot conversation (or person): never the flow id, which Langflow
# would otherwise use and so share one chat memory between every caller
SESSION_PREFIX = "langbot-"

CHAT_INPUT_TYPE = "ChatInput"

# the longest deleting one run's uploads, or one reset session's messages, may take
CLEANUP_SECONDS = 10.0

# /run?stream=true events that carry nothing a chat user sees
IGNORED_EVENTS = frozenset(
    {"end_vertex", "build_start", "build_end", "log", "vertices_sorted", "remove_message", "output"}
)
