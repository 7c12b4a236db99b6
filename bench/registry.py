"""What the benchmarks run against: one entry per landed plugin.

An HTTP plugin joins every per-plugin row with one :class:`HttpPlugin`, as ``ENTRY`` in its own
``bench/entries/<package>.py`` (the Dify entry below shows every field):

* ``start_server``  — start its loopback fake platform (127.0.0.1, free port) and return it; runs
  inside the ``python -m bench.serve`` subprocess, so the benchmark process holds only the client;
* ``stream``        — make that fake stream a given list of tokens with a given inter-token delay;
* ``run_key``       — which run a request belongs to (its input text; None for other requests);
* ``is_token_write``— whether bytes the fake wrote carry one answer token (to time them);
* ``config``        — the runner config pointing at the fake;
* ``floor_request`` / ``wire`` / ``floor_token`` — the bare floor: the same request, read with the
  same HTTP client and parsed only as far as the wire format demands (``wire``: ``sse`` or
  ``ndjson``), taking each token's text out of the parsed object;
* ``floor_prepare`` — where the platform needs a request before a new conversation can stream
  (WeKnora's session), the floor makes it too and returns the stream request.

A coding-agent runner joins section 6 the same way, with a :class:`CodingAgent` as its ``ENTRY``;
an in-process agent loop on LangBot's own models (LocalAgent) joins section 7 with an
:class:`InProcessAgent`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class HttpPlugin:
    plugin: str  # directory name (runners_cli.plugins.find)
    start_server: Callable[[], Any]
    stream: Callable[[Any, list[str], float], None]
    run_key: Callable[[Any], str | None]  # fake's Request -> the run's input text (None: not a run)
    is_token_write: Callable[[bytes], bool]
    config: Callable[[str], dict[str, Any]]  # base url -> runner config
    floor_request: Callable[[str, str], dict[str, Any]]  # (base url, input text) -> httpx request kwargs
    wire: str  # "sse" | "ndjson"
    floor_token: Callable[[Any], str | None]  # parsed wire object -> token text (None: not a token)
    # requests any client must make before the stream of a new conversation (e.g. creating the
    # session it streams into): (client, base url, input text) -> the floor_request to send
    floor_prepare: Callable[[Any, str, str], Awaitable[dict[str, Any]]] | None = None


@dataclass(frozen=True)
class CodingAgent:
    """A coding-agent runner driven by its scripted CLI fake over the shared fake model API
    (section 6). ``start`` returns a started ``tests.fakes.model_api.FakeModelAPI``; ``config``
    points the runner (its ``executable`` at the fake CLI) at it; ``answer`` sets what every model
    call streams; ``stop`` stops it."""

    plugin: str
    start: Callable[[], Any]
    config: Callable[[Any], dict[str, Any]]
    stop: Callable[[Any], None]

    @staticmethod
    def answer(srv: Any, tokens: list[str], delay: float) -> None:
        srv.answer_tokens = tokens
        srv.token_delay = delay
        srv.tool_command = None


@dataclass(frozen=True)
class InProcessAgent:
    """A runner whose "upstream" is LangBot's model layer (section 7): ``start`` returns a started
    fake OpenAI-compatible model server, ``prepare`` registers it (and the bench tool) on a local
    host, ``config`` is the runner config using them, ``stop`` stops the server."""

    plugin: str
    start: Callable[[], Any]
    prepare: Callable[[Any, Any], None]  # (server, LocalHost) -> None
    config: Callable[[Any], dict[str, Any]]
    stop: Callable[[Any], None]


BENCH_MODEL_KEY = "sk-bench-model-key"
FAKE_CLI_DIR = Path(__file__).resolve().parents[1] / "tests" / "fakes" / "cli"


def fake_model_agent(plugin: str, config: Callable[[Any, str], dict[str, Any]]) -> CodingAgent:
    """A ``CodingAgent`` over a fresh ``FakeModelAPI`` (accepting ``BENCH_MODEL_KEY``), with the
    runner's workspaces and homes in a temporary ``RUNNER_KIT_DATA_DIR`` removed at the end;
    ``config(srv, key)`` points the runner at its scripted CLI (in ``FAKE_CLI_DIR``) and the fake.

    Coding agents run sandboxed by default, and the scripted CLIs are Python scripts importing the
    venv's packages: while the entry runs, the sandbox may read the tests folder and the Python
    install (``LANGBOT_RUNNERS_SANDBOX_READ``, as tests/conftest.py sets it) and write
    ``srv.bench_shared``, a folder outside the data root for the fakes' own state
    (``LANGBOT_RUNNERS_SANDBOX_WRITE``). Nothing else is widened: each agent still sees only its
    own workspace and HOME."""
    import os
    import shutil
    import sys
    import tempfile

    from runner_kit.sandbox import READ_ENV, WRITE_ENV

    names = ("RUNNER_KIT_DATA_DIR", READ_ENV, WRITE_ENV)

    def start() -> Any:
        from tests.fakes.model_api import FakeModelAPI

        srv = FakeModelAPI(api_keys={BENCH_MODEL_KEY})
        srv.bench_old_env = {k: os.environ.get(k) for k in names}
        srv.bench_data = tempfile.mkdtemp(prefix=f"bench-{plugin}-")
        srv.bench_shared = tempfile.mkdtemp(prefix=f"bench-{plugin}-fake-")
        os.environ["RUNNER_KIT_DATA_DIR"] = srv.bench_data
        os.environ[READ_ENV] = os.pathsep.join(
            [str(FAKE_CLI_DIR.parents[1]), sys.prefix, sys.base_prefix, *_env_list(srv.bench_old_env[READ_ENV])])
        os.environ[WRITE_ENV] = os.pathsep.join([srv.bench_shared, *_env_list(srv.bench_old_env[WRITE_ENV])])
        return srv.start()

    def stop(srv: Any) -> None:
        srv.stop()
        for k, v in srv.bench_old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(srv.bench_data, ignore_errors=True)
        shutil.rmtree(srv.bench_shared, ignore_errors=True)

    return CodingAgent(plugin=plugin, start=start, config=lambda srv: config(srv, BENCH_MODEL_KEY), stop=stop)


def _env_list(value: str | None) -> list[str]:
    import os

    return [p for p in (value or "").split(os.pathsep) if p]


# --- Dify -------------------------------------------------------------------------------------

_DIFY_KEY = "app-bench-key"


def _dify_start() -> Any:
    from tests.fakes.dify import FakeDify

    srv = FakeDify(api_key=_DIFY_KEY, mode="chat")
    srv.record_requests = False
    srv.ping_every = 0  # real Dify pings every 10 s, not every few events
    return srv.start()


def _dify_stream(srv: Any, tokens: list[str], delay: float) -> None:
    srv.mode = "chat"
    srv.answer_tokens = tokens
    srv.token_delay = delay


def _dify_key(req: Any) -> str | None:
    if req.method != "POST" or not req.path.endswith(("/chat-messages", "/run")):
        return None  # uploads, stop requests: not a run
    return req.json().get("query", "")


def _dify_is_token(data: bytes) -> bool:
    return data.startswith(b'data: {"event": "message",')


def _dify_config(base_url: str) -> dict[str, Any]:
    return {"base-url": base_url, "api-key": _DIFY_KEY, "app-type": "chat"}


def _dify_floor_request(base_url: str, text: str) -> dict[str, Any]:
    return {
        "method": "POST",
        "url": base_url + "/chat-messages",
        "headers": {"Authorization": f"Bearer {_DIFY_KEY}"},
        "json": {
            "inputs": {},
            "query": text,
            "response_mode": "streaming",
            "user": "bench",
            "conversation_id": "",
        },
    }


def _dify_floor_token(obj: Any) -> str | None:
    return obj.get("answer") if obj.get("event") == "message" else None


HTTP_PLUGINS: list[HttpPlugin] = [
    HttpPlugin(
        plugin="dify-agent",
        start_server=_dify_start,
        stream=_dify_stream,
        run_key=_dify_key,
        is_token_write=_dify_is_token,
        config=_dify_config,
        floor_request=_dify_floor_request,
        wire="sse",
        floor_token=_dify_floor_token,
    ),
]

def _plugin_entries() -> tuple[list[HttpPlugin], list[CodingAgent], list[InProcessAgent]]:
    """Other plugins' entries, from ``bench/entries/<package>.py`` (a module-level ``ENTRY``), so
    plugins written side by side never edit the same file."""
    import importlib
    from pathlib import Path

    http: list[HttpPlugin] = []
    coding: list[CodingAgent] = []
    local: list[InProcessAgent] = []
    for path in sorted((Path(__file__).parent / "entries").glob("[a-z]*.py")):
        entry = importlib.import_module(f"bench.entries.{path.stem}").ENTRY
        if isinstance(entry, CodingAgent):
            coding.append(entry)
        elif isinstance(entry, InProcessAgent):
            local.append(entry)
        else:
            http.append(entry)
    return http, coding, local


_MORE_HTTP, _MORE_CODING, _MORE_LOCAL = _plugin_entries()
HTTP_PLUGINS += _MORE_HTTP
CODING_AGENTS: list[CodingAgent] = [*_MORE_CODING]
IN_PROCESS_AGENTS: list[InProcessAgent] = [*_MORE_LOCAL]


def http_plugin(name: str) -> HttpPlugin:
    for p in HTTP_PLUGINS:
        if p.plugin == name:
            return p
    raise KeyError(f"no benchmark entry for plugin {name!r}")
