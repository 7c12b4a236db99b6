"""Dify names: endpoints, stream event names and the state key."""

PLATFORM = "Dify"
SESSION_KEY = "dify.conversation_id"

CHAT_PATH = "/chat-messages"
WORKFLOW_PATH = "/workflows/run"
UPLOAD_PATH = "/files/upload"
CHAT_STOP_PATH = "/chat-messages/{task_id}/stop"
WORKFLOW_STOP_PATH = "/workflows/tasks/{task_id}/stop"

WORKFLOW_APP = "workflow"
OUTPUT_KEYS = ("answer", "text", "result", "output")

# events that carry nothing a chat user sees
IGNORED_EVENTS = frozenset(
    {
        "ping",
        "workflow_started",
        "node_started",
        "node_finished",
        "node_retry",
        "iteration_started",
        "iteration_next",
        "iteration_completed",
        "loop_started",
        "loop_next",
        "loop_completed",
        "parallel_branch_started",
        "parallel_branch_finished",
        "agent_log",
        "tts_message",
        "tts_message_end",
        "human_input_form_filled",
        "human_input_form_timeout",
    }
)
