"""One entry per plugin: how to start its fake platform, configure the runner against it, and which
taxonomy code each fault must produce. A new plugin joins the contract suite and the fault matrix
with one PluginCase, returned by ``cases()`` in its own ``tests/contract/case_<package>.py``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runners_cli.host import LocalHost

# fault name -> (code, retryable) shared by every HTTP platform; a case overrides where its
# platform says otherwise.
HTTP_FAULTS: dict[str, tuple[str, bool]] = {
    "refused": ("upstream.unavailable", True),
    "connect_timeout": ("upstream.timeout", True),
    "stall": ("upstream.timeout", True),
    "http_400": ("upstream.bad_request", False),
    "http_401": ("upstream.auth", False),
    "http_403": ("upstream.forbidden", False),
    "http_404": ("upstream.not_found", False),
    "http_413": ("upstream.too_large", False),
    "http_429": ("upstream.rate_limited", True),
    "http_500": ("upstream.unavailable", True),
    "http_502": ("upstream.unavailable", True),
    "http_503": ("upstream.unavailable", True),
    "html_400": ("upstream.bad_request", False),
    "html_401": ("upstream.auth", False),
    "html_403": ("upstream.forbidden", False),
    "html_404": ("upstream.not_found", False),
    "html_413": ("upstream.too_large", False),
    "html_429": ("upstream.rate_limited", True),
    "html_500": ("upstream.unavailable", True),
    "html_502": ("upstream.unavailable", True),
    "html_503": ("upstream.unavailable", True),
    "invalid_json": ("upstream.protocol", False),
    "truncated": ("upstream.unavailable", True),
    "error_event": ("upstream.unavailable", True),
    "empty": ("upstream.empty_response", False),
    "non_utf8": ("upstream.protocol", False),
    "oversized": ("upstream.protocol", False),
}


@dataclass(frozen=True)
class Seen:
    """One answer request as the fake platform received it."""

    credential: str  # the key/token the request authenticated with
    user: str  # the end-user identity the platform scopes conversations by
    conversation: str  # the upstream conversation the request continues ("" = a new one)
    cookie: str | None = None  # a Cookie header, which no request may carry
    sent: str = ""  # what the request carried, as text (the group cells find whose message went where)


def stream_tokens(srv: Any, tokens: list[str], delay: float) -> None:
    """The usual ``answer`` hook: the fake streams ``answer_tokens`` ``token_delay`` apart."""
    srv.answer_tokens = list(tokens)
    srv.token_delay = delay


def faults_with(**overrides: tuple[str, bool]) -> dict[str, tuple[str, bool]]:
    """The shared fault expectations with a platform's own (``faults_with(http_404=(...))``)."""
    return {**HTTP_FAULTS, **overrides}


def keyed_second_bot(config: Callable[[Any, str], dict[str, Any]]) -> Callable[[Any, str], dict[str, Any]]:
    """A ``second_bot`` hook for fakes that accept several keys (``api_keys``): the other bot's
    config is ``config(srv, key)``."""

    def second_bot(srv: Any, key: str) -> dict[str, Any]:
        srv.api_keys.add(key)
        return config(srv, key)

    return second_bot


@dataclass
class Question:
    """How a case's fake asks the chat something the run leaves open for a later answer (a coding
    agent's permission request under ``permission-mode: ask``, Dify's Human Input form, Coze's
    ``requires_action``, a DeerFlow graph interrupt), for the group cells (tests/contract/test_group.py)."""

    ask: Callable[[Any, bool], None]  # True: the fake's next answer asks; False: it answers plainly again
    answer: str  # what the asker types to answer it
    click: dict[str, Any]  # the asker's click on the buttons: {"action_id": …} and/or {"values": {…}}
    received: Callable[[Any], str | None]  # the answer the platform got (None while it got none)
    expect: str  # what ``received`` says once the asker's answer (typed or clicked) reached it
    config: dict[str, Any] = field(default_factory=dict)  # what the runner's config needs to ask
    shown: str = ""  # words of the question as the chat shows it in text
    # any words answer it (a free-text question): an approver in their own session then answers it
    # only with its button, since their typed words are their own message
    free_text: bool = False


@dataclass
class PluginCase:
    """How the contract suite drives one plugin. The hooks default to the names every fake on
    ``PlatformFake`` uses (``answer_tokens``/``token_delay``, ``include_usage``, ``fault``)."""

    plugin: str  # directory name
    start_server: Callable[[], Any]  # returns a started fake (context manager with .stop())
    config: Callable[[Any], dict[str, Any]]  # runner config pointing at the fake
    key: str | None = None  # the credential the config carries (the default ``secrets``)
    secrets: Callable[[Any], list[str]] | None = None  # values that must never show; default [key]
    answer: Callable[[Any, list[str], float], None] = stream_tokens  # stream these tokens, this far apart
    no_usage: Callable[[Any], None] = lambda srv: setattr(srv, "include_usage", False)  # no token usage
    set_fault: Callable[[Any, str], None] = lambda srv, name: setattr(srv, "fault", name)
    faults: dict[str, tuple[str, bool]] = field(default_factory=lambda: dict(HTTP_FAULTS))
    image_received: Callable[[Any], bool] | None = None  # multimodal_input check
    cancel_seen: Callable[[Any], bool] | None = None  # interrupt check
    # requests the fake is still serving (idle keep-alive connections in the shared pool are reuse, not leaks)
    open_connections: Callable[[Any], int] = lambda srv: srv.active_requests
    base_url_key: str = "base-url"
    # -- chat-experience cells (tests/contract/test_chat_experience.py) --
    # first token, then silence (False) or keep-alives only (True), until the run gives up
    stall: Callable[[Any, bool], None] | None = None
    # stream these reasoning pieces, then these answer tokens
    think: Callable[[Any, list[str], list[str]], None] | None = None
    # the platform forgets every conversation (deleted / expired upstream)
    forget_sessions: Callable[[Any], None] | None = None
    # every answer request so far, in order
    seen: Callable[[Any], list[Seen]] | None = None
    # the upstream conversations the fake saw ended or deleted, in order (Adapter.end_conversation);
    # None: the platform has no such API (its README says so)
    ended: Callable[[Any], list[str]] | None = None
    # the fake also accepts this key (a second bot on the same platform); returns that bot's config
    second_bot: Callable[[Any, str], dict[str, Any]] | None = None
    # a user-id-source option -> what a group sees ("person": one conversation each, "shared": one)
    group_modes: dict[str, str] = field(default_factory=dict)
    # -- steering cells (tests/contract/test_steering.py), for runners that declare steering --
    # the agent process behind each upstream request, in order (one live process per run)
    agent_pids: Callable[[Any], list[int]] | None = None
    # seconds a run needs before its first upstream request (a coding agent starts its CLI), added
    # to the short deadlines of the fault and timeout cells so a busy machine does not fail them
    startup: float = 0.0
    # -- runners on LangBot's own resources --
    # register on the test's local host what the runner's config selects (models, tools, knowledge
    # bases served from the fake); the ``host`` fixture then also starts the fake (``server``)
    prepare_host: Callable[[Any, LocalHost], None] | None = None
    # -- group cells (tests/contract/test_group.py) --
    # how the fake asks a question the run leaves open, or why this platform never asks (a reason a
    # user would accept); None: not written down yet
    question: Question | str | None = None

    def __post_init__(self) -> None:
        if self.secrets is None:
            key = self.key
            self.secrets = lambda srv: [key] if key else []


def _dify_cases() -> list[PluginCase]:
    from tests.fakes.dify import FakeDify

    def start() -> Any:
        srv = FakeDify(api_key="app-contract-secret-key")
        srv.start()
        return srv

    def answer(srv: Any, tokens: list[str], delay: float) -> None:
        srv.mode = "chat"
        srv.answer_tokens = tokens
        srv.token_delay = delay

    def stall(srv: Any, pings: bool) -> None:
        srv.mode = "chat"
        srv.answer_tokens = ["The first part ", "and the rest."]
        srv.fault = "stall_pings" if pings else "stall"

    def think(srv: Any, thoughts: list[str], tokens: list[str]) -> None:
        srv.mode = "chatflow"  # an LLM node with separated reasoning streams reasoning_chunk events
        srv.reasoning = "".join(thoughts)
        srv.answer_tokens = tokens

    def dify_config(srv: Any, key: str = "app-contract-secret-key") -> dict[str, Any]:
        return {"base-url": srv.base_url, "api-key": key, "app-type": "chat"}

    def seen(srv: Any) -> list[Seen]:
        out = []
        for r in srv.find_requests("POST", "/v1/chat-messages"):
            body = r.json()
            out.append(Seen(credential=r.headers.get("authorization", "").removeprefix("Bearer "),
                            user=body.get("user", ""), conversation=body.get("conversation_id") or "",
                            cookie=r.headers.get("cookie"), sent=r.body.decode("utf-8", "replace")))
        return out

    def ask(srv: Any, on: bool) -> None:
        # a chatflow whose Human Input node asks to approve or reject
        srv.mode = "chatflow"
        srv.human_input = {"node_title": "Approval", "form_content": "Publish the draft?", "inputs": [],
                           "actions": [{"id": "approve", "title": "Approve", "button_style": "primary"},
                                       {"id": "reject", "title": "Reject", "button_style": "default"}]} if on else None

    question = Question(ask=ask, answer="1", click={"action_id": "approve"},
                        received=lambda srv: srv.form_submissions[-1]["action"] if srv.form_submissions else None,
                        expect="approve", config={"app-type": "chatflow"}, shown="Publish the draft?")

    return [
        PluginCase(
            plugin="dify-agent",
            start_server=start,
            config=dify_config,
            key="app-contract-secret-key",
            answer=answer,
            image_received=lambda srv: any(
                f.get("transfer_method") == "local_file" and f.get("type") == "image"
                for r in srv.find_requests("POST", "/v1/chat-messages")
                for f in (r.json().get("files") or [])
            ),
            cancel_seen=lambda srv: bool(srv.stopped_tasks),
            stall=stall,
            think=think,
            forget_sessions=lambda srv: srv.forget_conversations(),
            seen=seen,
            ended=lambda srv: [cid for cid, _ in srv.deleted],
            second_bot=keyed_second_bot(dify_config),
            group_modes={"actor": "person", "hashed": "person", "conversation": "shared",
                         "legacy-session": "shared", "legacy-bot": "shared"},
            question=question,
        )
    ]


# plugin directory -> its case module (tests/contract/case_<package>.py, a ``cases()`` function);
# a new plugin adds its line here (tests/test_repo_check.py fails, naming this file, until it does)
PLUGIN_CASE_MODULES: dict[str, str] = {
    "acp-agent-runner": "case_acp_agent_runner",
    "claude-code-agent": "case_claude_code_agent",
    "codex-agent": "case_codex_agent",
    "coze-agent": "case_coze_agent",
    "dashscope-agent": "case_dashscope_agent",
    "deerflow-agent": "case_deerflow_agent",
    "langflow-agent": "case_langflow_agent",
    "licos-agent": "case_licos_agent",
    "local-agent": "case_local_agent",
    "n8n-agent": "case_n8n_agent",
    "tbox-agent": "case_tbox_agent",
    "weknora-agent": "case_weknora_agent",
}


def _plugin_modules() -> list[PluginCase]:
    """Every other plugin's cases, each in its own module so plugins never edit one shared block."""
    import importlib

    found: list[PluginCase] = []
    for plugin, module in PLUGIN_CASE_MODULES.items():
        cases = importlib.import_module(f"tests.contract.{module}").cases()
        assert all(c.plugin == plugin for c in cases), (plugin, [c.plugin for c in cases])
        found.extend(cases)
    return found


CASES: list[PluginCase] = [*_dify_cases(), *_plugin_modules()]
