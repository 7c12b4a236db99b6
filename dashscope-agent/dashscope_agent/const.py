"""DashScope (Alibaba Cloud Bailian / Model Studio) names: paths, headers, modes and the state key."""

PLATFORM = "DashScope"
SESSION_KEY = "dashscope.session_id"

DEFAULT_BASE_URL = "https://dashscope.aliyuncs.com/api/v1"
API_PREFIX = "/api/v1"
COMPLETION_PATH = "/apps/{app_id}/completion"

WORKFLOW_APP = "workflow"
AGENT_APP = "agent"

# workflow apps: how node output is streamed (parameters.flow_stream_mode)
FLOW_STREAM_MODES = ("full_thoughts", "agent_format", "message_format")
DEFAULT_FLOW_STREAM_MODE = "agent_format"

# thought action types that are reasoning, not a tool step
REASONING_ACTIONS = frozenset({"reasoning", "reasoning_content"})

DEFAULT_REFERENCES_QUOTE = "参考资料来自:"
