"""Dify names: endpoints, stream event names and the state key."""

PLATFORM = "Dify"
SESSION_KEY = "dify.conversation_id"

CHAT_PATH = "/chat-messages"
WORKFLOW_PATH = "/workflows/run"
UPLOAD_PATH = "/files/upload"
CHAT_STOP_PATH = "/chat-messages/{task_id}/stop"
WORKFLOW_STOP_PATH = "/workflows/tasks/{task_id}/stop"
# DELETE with {"user"} (chat-type apps): 204; Dify >= 1.8 deletes by id alone (langgenius/dify
# 3aedc139, api/services/conversation_service.py ConversationService.delete), older versions answer
# 404 not_found "Conversation Not Exists." for an unknown id or another user's
CONVERSATION_PATH = "/conversations/{conversation_id}"
# Human Input (langgenius/dify api/controllers/service_api/app/human_input_form.py and
# workflow_events.py; docs.dify.ai "Submit Human Input Form", "Stream Workflow Events"):
# POST {inputs, action, user} with the app key answers a paused form ({} on success; 404
# "Form not found", 412 human_input_form_expired / human_input_form_submitted, 400
# invalid_form_data); GET ?user=<the run's creator> streams the resumed run (the path parameter is
# called task_id but is looked up as the workflow run id)
FORM_SUBMIT_PATH = "/form/human_input/{form_token}"
WORKFLOW_EVENTS_PATH = "/workflow/{workflow_run_id}/events"
# conversation state: the paused form this conversation's user is asked (per Dify user)
PENDING_KEY = "dify.pending-form"

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
