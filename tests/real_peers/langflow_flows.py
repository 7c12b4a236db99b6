"""Builds the flows the real-Langflow test uploads; run with the Langflow venv's Python:

    <venv>/bin/python langflow_flows.py <fake model base url, ending in /v1>  > flows.json

Prints ``{"echo": <flow>, "llm": <flow>, "failing": <flow>}``, each a body for ``POST /api/v1/flows/``:

- ``echo``:    Chat Input → Chat Output (no model)
- ``llm``:     Chat Input → OpenAI (streaming, base URL = the fake model) → Chat Output, with a
               Message History component feeding the session's earlier messages in as the system
               message, so a second turn in the same session reaches the model with the first one
- ``failing``: the same, but the model points at a closed port, so every run fails in the component
"""

from __future__ import annotations

import json
import sys


def _llm_flow(base_url: str, name: str) -> dict:
    from lfx.components.input_output import ChatInput, ChatOutput
    from lfx.components.models_and_agents.memory import MemoryComponent
    from lfx.graph import Graph
    from lfx_openai.components.openai.openai_chat_model import OpenAIModelComponent

    chat_in = ChatInput()
    memory = MemoryComponent()
    memory.set(n_messages=20, order="Ascending")
    model = OpenAIModelComponent()
    model.set(
        model_name="gpt-4o-mini",
        openai_api_base=base_url,
        api_key="sk-fake-model-key",
        stream=True,
        max_retries=0,
        timeout=20,
        input_value=chat_in.message_response,
        system_message=memory.retrieve_messages_as_text,
    )
    chat_out = ChatOutput()
    chat_out.set(input_value=model.text_response)
    return Graph(chat_in, chat_out).dump(name=name, description="LangBot real-peer test flow")


def main() -> None:
    from lfx.components.input_output import ChatInput, ChatOutput
    from lfx.graph import Graph

    base_url = sys.argv[1]
    closed = sys.argv[2] if len(sys.argv) > 2 else "http://127.0.0.1:9/v1"
    chat_in = ChatInput()
    chat_out = ChatOutput()
    chat_out.set(input_value=chat_in.message_response)
    flows = {
        "echo": Graph(chat_in, chat_out).dump(name="lb-echo", description="Chat Input -> Chat Output"),
        "llm": _llm_flow(base_url, "lb-llm"),
        "failing": _llm_flow(closed, "lb-failing"),
    }
    json.dump(flows, sys.stdout)


if __name__ == "__main__":
    main()
