"""DashScope (Alibaba Cloud Bailian / Model Studio) names: paths, headers, modes and the state key."""

PLATFORM = "DashScope"
SESSION_KEY = "dashscope.session_id"

DEFAULT_BASE_URL = "https://dashscope.aliyuncs.com/api/v1"
API_PREFIX = "/api/v1"
COMPLETION_PATH = "/apps/{app_id}/completion"

WORKFLOW_APP = "workflow"
AGENT_APP = "agent"

# workflow apps: how node output is streamed (parameters.flow_stream_mode). message_format is what
# LangBot 4.10's dashscope-app-api runner sent for every workflow app, so migrated workflows keep
# answering with the same nodes' text
FLOW_STREAM_MODES = ("full_thoughts", "agent_format", "message_format")
DEFAULT_FLOW_STREAM_MODE = "message_format"
MESSAGE_FORMAT = "message_format"

# thought action types that are reasoning, not a tool step
REASONING_ACTIONS = frozenset({"reasoning", "reasoning_content"})

DEFAULT_REFERENCES_QUOTE = "参考资料来自:"

# parameters.enable_thinking: "auto" is what LangBot 4.10 sent (on, off while reasoning is hidden)
THINKING_AUTO, THINKING_ON, THINKING_OFF, THINKING_APP = "auto", "on", "off", "app"
# input.doc_reference_type: "app" sends none (the app's own choice)
DOC_REFERENCE_TYPES = ("indexed", "simple")

# temporary storage for images sent as data (GET {base}/uploads?action=getPolicy&model=…, then a
# form POST to the OSS host it names; the object is then read as oss://<key> by a request carrying
# the resolve header). Bound to the model named, kept 48 hours.
UPLOADS_PATH = "/uploads"
OSS_RESOLVE_HEADER = "X-DashScope-OssResourceResolve"
DEFAULT_UPLOAD_MODEL = "qwen-vl-max"
