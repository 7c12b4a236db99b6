"""The Dify apps the real-Dify suite imports (Dify DSL 0.5.0, written here; JSON is valid YAML).

None of them has a model node: this server has no plugin daemon, so no model provider.

- ``chatflow``:      Start → Answer ``echo: {{sys.query}} | last: {{conversation.last}}`` → Variable
                     Assigner (``conversation.last := sys.query``): the second turn of a kept
                     conversation answers with the first turn's text. File upload is on.
- ``chatflow_files``: Start → Answer ``got: {{sys.query}} | files: {{sys.files}}`` (Dify renders a
                     file list as Markdown links named after the files).
- ``chatflow_slow``: Start → HTTP Request (GET ``slow_url?…step=1``, which answers late) → a second
                     one (``step=2``) → Answer: a run that was stopped never makes the second request.
- ``workflow``:      Start (``langbot_user_message_text``, required) → End (``result`` = it).
- ``workflow_slow``: the same two requests → End (``result`` = the second body).
- ``workflow_ticket``: Start (``ticket``, required, not something the plugin sends) → End.
"""

from __future__ import annotations

from typing import Any

DSL_VERSION = "0.5.0"  # with dependencies: [] the import never asks the marketplace


def _features(files: bool) -> dict[str, Any]:
    return {
        "file_upload": {
            "enabled": files,
            "allowed_file_types": ["image", "document"],
            "allowed_file_extensions": [],
            "allowed_file_upload_methods": ["local_file", "remote_url"],
            "number_limits": 3,
            "image": {"enabled": files, "number_limits": 3, "transfer_methods": ["local_file", "remote_url"]},
        },
        "opening_statement": "",
        "retriever_resource": {"enabled": False},
        "sensitive_word_avoidance": {"enabled": False},
        "speech_to_text": {"enabled": False},
        "suggested_questions": [],
        "suggested_questions_after_answer": {"enabled": False},
        "text_to_speech": {"enabled": False, "language": "", "voice": ""},
    }


def _node(node_id: str, **data: Any) -> dict[str, Any]:
    return {"id": node_id, "type": "custom", "position": {"x": 0, "y": 0},
            "data": {"desc": "", "selected": False, **data}}


def _edges(*chain: tuple[str, str]) -> list[dict[str, Any]]:
    edges = []
    for (source, stype), (target, ttype) in zip(chain, chain[1:], strict=False):
        edges.append({"id": f"{source}-source-{target}-target", "source": source, "sourceHandle": "source",
                      "target": target, "targetHandle": "target", "type": "custom",
                      "data": {"sourceType": stype, "targetType": ttype, "isInIteration": False, "isInLoop": False}})
    return edges


def _start(*variables: tuple[str, bool]) -> dict[str, Any]:
    return _node("start", type="start", title="Start", variables=[
        {"variable": name, "label": name, "type": "paragraph", "required": required, "max_length": None,
         "options": []} for name, required in variables])


def _http(url: str, node_id: str = "http") -> dict[str, Any]:
    return _node(node_id, type="http-request", title=f"Slow request {node_id}", method="get", url=url,
                 authorization={"type": "no-auth", "config": None}, headers="", params="",
                 body={"type": "none", "data": []}, timeout={"connect": 10, "read": 120, "write": 30},
                 retry_config={"enabled": False, "max_retries": 1, "retry_interval": 100}, ssl_verify=False)


def _end(selector: list[str]) -> dict[str, Any]:
    return _node("end", type="end", title="End",
                 outputs=[{"variable": "result", "value_selector": selector, "value_type": "string"}])


def _answer(text: str) -> dict[str, Any]:
    return _node("answer", type="answer", title="Answer", answer=text, variables=[])


def _app(name: str, mode: str, nodes: list[dict[str, Any]], edges: list[dict[str, Any]], *,
         conversation_variables: list[dict[str, Any]] | None = None, files: bool = False) -> dict[str, Any]:
    return {
        "version": DSL_VERSION,
        "kind": "app",
        "dependencies": [],
        "app": {"name": name, "mode": mode, "description": "LangBot real-peer test app", "icon": "🤖",
                "icon_background": "#FFEAD5", "use_icon_as_answer_icon": False},
        "workflow": {
            "conversation_variables": conversation_variables or [],
            "environment_variables": [],
            "features": _features(files),
            "graph": {"nodes": nodes, "edges": edges, "viewport": {"x": 0, "y": 0, "zoom": 1}},
        },
    }


def chatflow() -> dict[str, Any]:
    assign = _node("assign", type="assigner", title="Remember", version="2", items=[
        {"variable_selector": ["conversation", "last"], "input_type": "variable", "operation": "over-write",
         "value": ["sys", "query"], "write_mode": "over-write"}])
    last = {"id": "7d3c1f5e-1b2a-4c3d-9e8f-000000000001", "name": "last", "selector": ["conversation", "last"],
            "value": "none", "value_type": "string", "description": "the previous message"}
    return _app("lb-chatflow", "advanced-chat",
                [_start(), _answer("echo: {{#sys.query#}} | last: {{#conversation.last#}}"), assign],
                _edges(("start", "start"), ("answer", "answer"), ("assign", "assigner")),
                conversation_variables=[last], files=True)


def chatflow_files() -> dict[str, Any]:
    return _app("lb-chatflow-files", "advanced-chat",
                [_start(), _answer("got: {{#sys.query#}} | files: {{#sys.files#}}")],
                _edges(("start", "start"), ("answer", "answer")), files=True)


def chatflow_slow(slow_url: str) -> dict[str, Any]:
    return _app("lb-chatflow-slow", "advanced-chat",
                [_start(), _http(f"{slow_url}?app=chatflow&step=1"), _http(f"{slow_url}?app=chatflow&step=2", "http2"),
                 _answer("slow: {{#http2.body#}}")],
                _edges(("start", "start"), ("http", "http-request"), ("http2", "http-request"), ("answer", "answer")))


def workflow() -> dict[str, Any]:
    return _app("lb-workflow", "workflow",
                [_start(("langbot_user_message_text", True)), _end(["start", "langbot_user_message_text"])],
                _edges(("start", "start"), ("end", "end")))


def workflow_slow(slow_url: str) -> dict[str, Any]:
    return _app("lb-workflow-slow", "workflow",
                [_start(), _http(f"{slow_url}?app=workflow&step=1"), _http(f"{slow_url}?app=workflow&step=2", "http2"),
                 _end(["http2", "body"])],
                _edges(("start", "start"), ("http", "http-request"), ("http2", "http-request"), ("end", "end")))


def workflow_files() -> dict[str, Any]:
    end = _node("end", type="end", title="End", outputs=[
        {"variable": "result", "value_selector": ["start", "langbot_user_message_text"], "value_type": "string"},
        {"variable": "files", "value_selector": ["sys", "files"], "value_type": "array[file]"}])
    return _app("lb-workflow-files", "workflow", [_start(("langbot_user_message_text", True)), end],
                _edges(("start", "start"), ("end", "end")), files=True)


def workflow_ticket() -> dict[str, Any]:
    return _app("lb-workflow-ticket", "workflow", [_start(("ticket", True)), _end(["start", "ticket"])],
                _edges(("start", "start"), ("end", "end")))


def all_apps(slow_url: str) -> dict[str, dict[str, Any]]:
    return {
        "chatflow": chatflow(),
        "chatflow_files": chatflow_files(),
        "chatflow_slow": chatflow_slow(slow_url),
        "workflow": workflow(),
        "workflow_slow": workflow_slow(slow_url),
        "workflow_ticket": workflow_ticket(),
        "workflow_files": workflow_files(),
        "workflow_unpublished": {**workflow(), "app": {**workflow()["app"], "name": "lb-workflow-unpublished"}},
    }
