"""The real LangBot 4.11.2 host for the end-to-end suites (opt-in: ``RUN_SLOW=1``).

One LangBot per test session (the ``langbot`` fixture in ``conftest.py``), all on 127.0.0.1 with
ports picked at run time:

- LangBot 4.11.2 from a venv outside the repository, cached between runs
  (``$LANGBOT_E2E_VENV``, default ``~/.cache/langbot-agent-runners/langbot-4.11.2-venv``);
- the plugin runtime (``lbp rt``) through ``loopback_runtime.py``, which keeps its websocket
  servers on loopback.

``Host`` is the small API the suites drive it with: plugins (``install_plugin``), agents and their
debug API, pipelines and their WebUI websocket (``ws_chat`` / ``ws_conversation``), model
providers and LLM models (``create_llm_model``), legacy 4.10 pipelines written straight into SQLite
(``insert_legacy_pipeline``) and the migration, and the run ledger (``runs``, ``run_events``).

The first run installs LangBot (about 2 minutes, ~1.6 GB); later runs reuse the venv.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from runners_cli.build import build_plugin
from runners_cli.plugins import PluginInfo
from tests.helpers import shared_dir
from tests.real_peers.peers import wait_reporting

LANGBOT_VERSION = "4.11.2"
# SQLAlchemy 2.1 breaks the host's TenantUnitOfWork upserts (host-contract.md section 6)
REQUIREMENTS = (f"langbot=={LANGBOT_VERSION}", "sqlalchemy[asyncio]>=2.0.40,<2.1")
DEFAULT_VENV = f"~/.cache/langbot-agent-runners/langbot-{LANGBOT_VERSION}-venv"
MARKER = ".langbot-e2e-ready"
# frozen from a working install, so a new release of one of LangBot's dependencies cannot break
# the e2e run the way SQLAlchemy 2.1 did (host-contract.md section 6)
CONSTRAINTS = Path(__file__).with_name(f"langbot-{LANGBOT_VERSION}-constraints.txt")
LOOPBACK = "127.0.0.1"
LAUNCHER = Path(__file__).with_name("loopback_runtime.py")

# agent_run.status values that end a run (run_ledger_store.py TERMINAL_STATUSES)
RUN_TERMINAL = {"completed", "failed", "cancelled", "timeout"}
# what LangBot 4.11.2 itself puts in the chat when a runner fails (pipeline/process/handlers/chat.py)
HOST_FAILURE_NOTICES = ("Agent runner execution failed.", "Agent runner temporarily unavailable. Please try again.",
                        "Request failed.")
WEBSOCKET_BOT = "websocket-proxy-bot"  # the bot id of every WebUI websocket chat run
HOST_FIELDS = {"enable-all-tools", "tools", "knowledge-bases", "mcp-resources", "mcp-resource-agent-read-enabled"}

INSTALL_TIMEOUT = 900.0
START_TIMEOUT = 120.0
PLUGIN_TIMEOUT = 300.0

_T0 = time.monotonic()


def sandbox_grants(plugin: PluginInfo) -> dict[str, Any]:
    """What an owner would add to a coding agent's config so the sandboxed agent can reach the test
    files: LangBot starts plugin workers with an empty environment, so the test session's
    ``LANGBOT_RUNNERS_SANDBOX_READ``/``_WRITE`` (tests/conftest.py) never reach the runner there;
    the same paths go in through its ``sandbox-read-paths``/``sandbox-write-paths`` settings (the
    scripted CLIs and the Python that runs them; the folder their logs and state files are in).
    Nothing for a plugin whose form has no sandbox settings."""
    names = {item.get("name") for item in plugin.config_items}
    if "sandbox-read-paths" not in names:
        return {}
    from runner_kit import sandbox

    def lines(env: str) -> str:
        return "\n".join(p for p in os.environ.get(env, "").split(os.pathsep) if p)

    return {"advanced-settings": True, "sandbox-read-paths": lines(sandbox.READ_ENV),
            "sandbox-write-paths": lines(sandbox.WRITE_ENV)}


def say(msg: str) -> None:
    print(f"[e2e {time.monotonic() - _T0:6.1f}s] {msg}", file=sys.stderr, flush=True)


# --- what the session measured: plugin x check, and timings -------------------------------------------

#: plugin -> check -> "pass" / "skip" / "FAIL", filled by every e2e module and printed at the end of
#: the session (conftest.py ``pytest_terminal_summary``)
CHECKS: dict[str, dict[str, str]] = {}
#: plugin -> measurement -> seconds (install, first text, message, ...)
TIMINGS: dict[str, dict[str, float]] = {}


def record(plugin: str, check: str, outcome: str) -> None:
    CHECKS.setdefault(plugin, {})[check] = outcome


def timing(plugin: str, **seconds: float | None) -> None:
    TIMINGS.setdefault(plugin, {}).update({k.replace("_", " "): v for k, v in seconds.items() if v is not None})


def outcome_of(item: Any) -> str:
    """pass / skip / FAIL of a finished test item (its reports are kept by conftest.py)."""
    reports = [getattr(item, f"e2e_report_{when}", None) for when in ("setup", "call")]
    if any(r is not None and r.failed for r in reports):
        return "FAIL"
    if any(r is not None and r.skipped for r in reports):
        return "skip"
    call = reports[1]
    return "pass" if call is not None and call.passed else "FAIL"


def table_lines() -> list[str]:
    checks = list(dict.fromkeys(c for row in CHECKS.values() for c in row))
    if not checks:
        return []
    width = max(len(p) for p in CHECKS)
    cols = [max(len(c), 4) for c in checks]
    lines = ["plugin x check (real LangBot 4.11.2; - = not applicable):",
             " ".join([" " * width, *(c.ljust(w) for c, w in zip(checks, cols, strict=True))])]
    for plugin, row in sorted(CHECKS.items()):
        lines.append(" ".join([plugin.ljust(width), *(row.get(c, "-").ljust(w) for c, w in zip(checks, cols, strict=True))]))
    for plugin, t in sorted(TIMINGS.items()):
        lines.append(f"{plugin}: " + ", ".join(f"{k} {v:.2f}s" for k, v in t.items()))
    return lines


def wait_for(what: str, probe: Callable[[], Any], timeout: float, interval: float = 0.5,
              alive: Callable[[], None] | None = None) -> Any:
    """Poll ``probe`` until it returns something truthy; ``alive`` raises when a process died."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if alive is not None:
            alive()
        try:
            result = probe()
        except (httpx.HTTPError, OSError, KeyError, ValueError) as exc:
            last_error = exc
        else:
            if result:
                return result
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}" +
                       (f" (last error: {type(last_error).__name__}: {last_error})" if last_error else ""))


# --- the cached LangBot venv --------------------------------------------------------------------


def _venv_dir() -> Path:
    return Path(os.environ.get("LANGBOT_E2E_VENV") or DEFAULT_VENV).expanduser().resolve()


def _marker_text() -> str:
    pins = hashlib.sha256(CONSTRAINTS.read_bytes()).hexdigest()
    return json.dumps({"requirements": list(REQUIREMENTS), "constraints": pins}, sort_keys=True)


def _venv_ready(venv: Path) -> bool:
    marker = venv / MARKER
    return (
        (venv / "bin" / "langbot").is_file()
        and (venv / "bin" / "lbp").is_file()
        and marker.is_file()
        and marker.read_text(encoding="utf-8") == _marker_text()
    )


def provide_venv() -> Path:
    """The LangBot venv: reused when a previous install finished, otherwise (re)created."""
    venv = _venv_dir()
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test run may be installing right now
        if _venv_ready(venv):
            say(f"reusing LangBot {LANGBOT_VERSION} venv at {venv}")
            return venv
        if venv.exists():
            if not (venv / "pyvenv.cfg").is_file():
                pytest.fail(f"{venv} exists and is not a venv; remove it or point LANGBOT_E2E_VENV elsewhere")
            say(f"removing the unfinished venv at {venv}")
            shutil.rmtree(venv)
        log = venv.parent / f"{venv.name}-install.log"
        started = time.monotonic()
        python = shutil.which("python3") or sys.executable
        # uv (which .ci/run installs) downloads and unpacks in parallel: under a minute where pip takes
        # about 2.5; the constraints pin every package, so both give the same venv. The venv keeps its
        # own pip, which LangBot uses to install a plugin's requirements.
        uv = shutil.which("uv")
        installer = ([uv, "pip", "install", "--python", str(venv / "bin" / "python")] if uv else
                     [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check"])
        say(f"installing LangBot {LANGBOT_VERSION} into {venv} with {'uv' if uv else 'pip'} (first run only, "
            f"{'about a minute' if uv else 'about 2.5 minutes'}); log: {log}")
        with open(log, "w") as out:
            subprocess.run([python, "-m", "venv", str(venv)], check=True, stdout=out, stderr=subprocess.STDOUT)
            proc = subprocess.Popen(
                [*installer, "-c", str(CONSTRAINTS), *REQUIREMENTS],
                stdout=out, stderr=subprocess.STDOUT, env=_clean_env(venv),
            )
            wait_reporting(
                proc, started, INSTALL_TIMEOUT, progress=lambda t: say(f"  still installing ({t:.0f}s)"),
                give_up=lambda: pytest.fail(f"pip install timed out after {INSTALL_TIMEOUT:.0f}s; see {log}"),
            )
        if proc.returncode != 0:
            pytest.fail(f"pip install failed (exit {proc.returncode}):\n{_tail(log, 30)}")
        check = subprocess.run(
            [str(venv / "bin" / "python"), "-c",
             "import importlib.metadata as m; print(m.version('langbot'), m.version('sqlalchemy'))"],
            capture_output=True, text=True, env=_clean_env(venv),
        )
        versions = check.stdout.split()
        if check.returncode != 0 or len(versions) != 2 or versions[0] != LANGBOT_VERSION or not versions[1].startswith("2.0."):
            pytest.fail(f"the LangBot venv is not as expected: {check.stdout.strip()} {check.stderr.strip()[-500:]}")
        (venv / MARKER).write_text(_marker_text(), encoding="utf-8")
        say(f"installed langbot {versions[0]}, sqlalchemy {versions[1]} in {time.monotonic() - started:.0f}s")
        return venv


def _clean_env(venv: Path, **extra: str) -> dict[str, str]:
    """The environment for LangBot's processes: their venv first, nothing from the test's venv."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "UV_PROJECT_ENVIRONMENT")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


# --- processes ------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def _tail(path: Path, lines: int) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


def _proc_table() -> dict[int, tuple[int, str]]:
    """pid -> (ppid, start time) from /proc (empty where there is no /proc)."""
    table = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        table[int(entry.name)] = (int(fields[1]), fields[19])
    return table


def _descendants(pid: int) -> dict[int, str]:
    """Every live descendant of ``pid`` with its start time (to never kill a recycled pid)."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for child, (parent, _) in table.items():
        children.setdefault(parent, []).append(child)
    found: dict[int, str] = {}
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found[child] = table[child][1]
                stack.append(child)
    return found


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log: Path

    def check_alive(self) -> None:
        if self.popen.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.popen.returncode}:\n{_tail(self.log, 40)}")

    def stop(self, grace: float) -> list[int]:
        """SIGTERM the process group, SIGKILL it after ``grace``, then any descendant that escaped it;
        returns the descendants still alive after that (none, unless something cannot be killed)."""
        pid = self.popen.pid
        escaped = _descendants(pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        self.popen.wait(timeout=30)
        table = _proc_table()
        for child, started in escaped.items():
            if table.get(child, (None, None))[1] == started:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while True:
            table = _proc_table()
            # a killed child stays in the table as a zombie until its reaper (init) collects it
            alive = [c for c, started in escaped.items() if table.get(c, (None, None))[1] == started
                     and not _zombie(c)]
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.1)


def _zombie(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


# --- the host -------------------------------------------------------------------------------------


@dataclass
class Host:
    venv: Path
    root: Path
    token: str = field(default_factory=lambda: secrets.token_hex(24))  # 48 chars, >= 32 required
    procs: list[Proc] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)
    client: httpx.Client | None = None
    workspace: str = ""
    user_token: str = ""
    installed_version: str = ""
    installed: dict[str, float] = field(default_factory=dict)  # plugin -> install seconds

    # -- lifecycle --

    def start(self) -> None:
        ports: set[int] = set()
        while len(ports) < 3:
            ports.add(free_port())
        control, debug, api = sorted(ports)
        self.ports = {"control": control, "debug": debug, "api": api}
        env = _clean_env(self.venv, LANGBOT_PLUGIN_RUNTIME_CONTROL_TOKEN=self.token)

        say(f"starting the plugin runtime on {LOOPBACK}:{control} (control) and :{debug} (debug)")
        runtime = self._spawn(
            "runtime",
            [str(self.venv / "bin" / "python"), str(LAUNCHER),
             "--ws-control-port", str(control), "--ws-debug-port", str(debug)],
            env,
        )
        for port in (control, debug):
            wait_for(f"the runtime health check on :{port}",
                     lambda p=port: httpx.get(f"http://{LOOPBACK}:{p}/healthz", timeout=2).status_code == 200,
                     START_TIMEOUT, alive=runtime.check_alive)

        say(f"starting LangBot on {LOOPBACK}:{api}")
        langbot = self._spawn(
            "langbot",
            [str(self.venv / "bin" / "langbot")],
            {**env,
             "PLUGIN__RUNTIME_WS_URL": f"ws://{LOOPBACK}:{control}/control/ws",
             "API__PORT": str(api),
             "API__HOST": LOOPBACK},
        )
        self.client = httpx.Client(base_url=f"http://{LOOPBACK}:{api}", timeout=60, trust_env=False)
        wait_for("LangBot /healthz", lambda: self.client.get("/healthz", timeout=2).status_code == 200,
                 START_TIMEOUT, alive=langbot.check_alive)
        say("LangBot is up")

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> Proc:
        cwd = self.root / name
        cwd.mkdir()
        log = self.root / f"{name}.log"
        with open(log, "wb") as out:
            popen = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def alive(self) -> None:
        for proc in self.procs:
            proc.check_alive()

    def stop(self) -> None:
        if self.client is not None:
            self.client.close()
        # LangBot first, so it does not reconnect to a dying runtime; the runtime takes its workers along
        survivors: list[int] = []
        for proc in reversed(self.procs):
            survivors += proc.stop(grace=2 if proc.name == "langbot" else 10)  # LangBot takes ~8 s on SIGTERM
        leftovers = [p for p in self.procs if p.popen.poll() is None]
        busy = [port for port in self.ports.values() if not _port_free(port)]
        if leftovers or busy or survivors:
            raise RuntimeError(f"teardown left processes {[p.name for p in leftovers]}, descendants {survivors}"
                               f" or busy ports {busy}")
        say("stopped LangBot and the plugin runtime")

    def dump_logs(self, lines: int = 60) -> None:
        for proc in self.procs:
            print(f"\n----- last {lines} lines of {proc.log} -----\n{_tail(proc.log, lines)}", file=sys.stderr)

    @property
    def db_path(self) -> Path:
        return self.root / "langbot" / "data" / "langbot.db"

    # -- API --

    def api(self, method: str, path: str, *, ok: bool = True, **kwargs: Any) -> httpx.Response:
        """A call with the account's headers; ``ok`` asserts HTTP 200 and ``code == 0``."""
        assert self.client is not None
        headers = {"Authorization": f"Bearer {self.user_token}", "X-Workspace-Id": self.workspace}
        resp = self.client.request(method, path, headers=headers, **kwargs)
        if ok:
            assert resp.status_code == 200 and resp.json().get("code") == 0, \
                f"{method} {path} -> {resp.status_code}: {resp.text[:2000]}"
        return resp

    def data(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.api(method, path, **kwargs).json()["data"]

    def login(self) -> None:
        assert self.client is not None
        account = {"user": "e2e@example.com", "password": "e2e-" + secrets.token_hex(8)}
        resp = self.client.post("/api/v1/user/init", json=account)
        assert resp.status_code == 200 and resp.json()["code"] == 0, resp.text
        resp = self.client.post("/api/v1/user/auth", json=account)
        assert resp.status_code == 200 and resp.json()["code"] == 0, resp.text
        self.user_token = resp.json()["data"]["token"]
        resp = self.client.get("/api/v1/workspaces", headers={"Authorization": f"Bearer {self.user_token}"})
        workspaces = resp.json()["data"]["workspaces"]
        assert len(workspaces) == 1, workspaces
        self.workspace = workspaces[0]["uuid"]
        # the plugin list needs the runtime connection, so this also waits for LangBot <-> runtime
        wait_for("LangBot's connection to the plugin runtime",
                 lambda: self.api("GET", "/api/v1/plugins", ok=False).json().get("code") == 0,
                 START_TIMEOUT, alive=self.alive)
        say(f"account ready, workspace {self.workspace}")

    def wait_task(self, task_id: int, what: str, timeout: float) -> dict[str, Any]:
        started = time.monotonic()
        last_action = None

        def done() -> dict[str, Any] | None:
            nonlocal last_action
            task = self.data("GET", f"/api/v1/system/tasks/{task_id}")
            action = (task.get("task_context") or {}).get("current_action")
            if action != last_action:
                say(f"  {what}: {action} ({time.monotonic() - started:.0f}s)")
                last_action = action
            return task if task["runtime"]["done"] else None

        task = wait_for(what, done, timeout, interval=1.0, alive=self.alive)
        runtime = task["runtime"]
        assert runtime["state"] == "FINISHED" and not runtime["exception"], \
            f"{what} failed: {json.dumps(task)[:3000]}"
        return task

    def install_plugin(self, plugin: PluginInfo) -> float:
        """Build ``plugin``, install it through the HTTP API, wait for its runner; returns the seconds taken."""
        started = time.monotonic()
        package = build_plugin(plugin, self.root / "dist", stage_root=self.root / "stage")
        say(f"built {package.name}; installing it (the runtime checks its requirements and installs missing ones from PyPI)")
        self.install_package(package)
        runner_id = plugin.runner_id
        wait_for(f"{runner_id} in the agent runner list", lambda: runner_id in self.runner_ids(),
                 PLUGIN_TIMEOUT, interval=1.0, alive=self.alive)
        plugins = self.data("GET", "/api/v1/plugins")["plugins"]
        took = time.monotonic() - started
        say(f"runner {runner_id} is available after {took:.1f}s; plugins: {_plugin_names(plugins)}")
        self.installed[plugin.name] = took
        return took

    def install_package(self, package: Path) -> None:
        """Install a built ``.lbpkg`` through the HTTP API (as the WebUI's local upload does)."""
        with open(package, "rb") as fh:
            task_id = self.data("POST", "/api/v1/plugins/install/local",
                                files={"file": (package.name, fh, "application/octet-stream")})["task_id"]
        self.wait_task(task_id, "plugin install", PLUGIN_TIMEOUT)

    def runner_ids(self) -> list[str]:
        """Runner ids offered for agents (the options of the ``id`` select in the runner stage)."""
        meta = self.data("GET", "/api/v1/agents/_/metadata")
        ids = []
        for stage in meta["runner_config"]["stages"]:
            for item in stage.get("config") or []:
                if item.get("name") == "id":
                    ids += [opt.get("name") for opt in item.get("options") or []]
        return ids

    def runner_stage(self, runner_id: str) -> dict[str, Any]:
        meta = self.data("GET", "/api/v1/agents/_/metadata")
        return next(s for s in meta["runner_config"]["stages"] if s.get("name") == runner_id)

    def create_agent(self, name: str, runner_config: dict[str, Any], runner_id: str) -> str:
        body = {"name": name, "kind": "agent",
                "config": {"runner": {"id": runner_id}, "runner_config": {runner_id: runner_config}}}
        return self.data("POST", "/api/v1/agents", json=body)["uuid"]

    def debug(self, agent: str, text: str, conversation_id: str) -> httpx.Response:
        return self.api("POST", f"/api/v1/agents/{agent}/debug", ok=False,
                        json={"text": text, "conversation_id": conversation_id})

    def debug_stream(self, agent: str, text: str, conversation_id: str,
                     until: Callable[[dict[str, Any]], bool] | None = None) -> list[dict[str, Any]]:
        """``/debug/stream`` (what the WebUI's agent debug panel calls): its NDJSON frames. With
        ``until``, the stream is closed once a frame satisfies it, as a user closing the debug panel
        does: LangBot 4.11.2 cancels the run when its consumer goes away (``agent_debug_stream.py``;
        the ledger says ``cancelled`` / ``consumer_cancelled``)."""
        assert self.client is not None
        headers = {"Authorization": f"Bearer {self.user_token}", "X-Workspace-Id": self.workspace}
        frames = []
        with self.client.stream("POST", f"/api/v1/agents/{agent}/debug/stream", headers=headers,
                                json={"text": text, "conversation_id": conversation_id}) as resp:
            assert resp.status_code == 200, resp.read()[:2000]
            for line in resp.iter_lines():
                if line.strip():
                    frames.append(json.loads(line))
                    if until is not None and until(frames[-1]):
                        break
        return frames

    def create_pipeline(self, name: str, runner_config: dict[str, Any], runner_id: str) -> str:
        """A pipeline made through the API (the default template) bound to a plugin's runner."""
        pipeline = self.data("POST", "/api/v1/pipelines", json={"name": name})["uuid"]
        current = self.data("GET", f"/api/v1/pipelines/{pipeline}")["pipeline"]
        config = current["config"]
        config["ai"]["runner"] = {"id": runner_id, "expire-time": 0}
        config["ai"]["runner_config"] = {runner_id: runner_config}
        self.api("PUT", f"/api/v1/pipelines/{pipeline}",
                 json={"name": name, "description": current.get("description") or "", "config": config})
        return pipeline

    def create_lark_bot(self, name: str, pipeline: str, lark: FakeLark, *, stream_reply: bool = False) -> str:
        """A webhook-mode ``lark-omni`` bot (the adapter that renders interactions as card buttons)
        pointed at ``lark``, routing every message to ``pipeline``; returns its uuid. ``stream_reply``
        is the bot's "Enable Stream Reply Mode" (off by default, as in LangBot): replies then go out
        as updating CardKit cards instead of messages."""
        body = {
            "name": name, "description": "", "adapter": "lark-omni", "enable": True,
            "adapter_config": {"app_id": "cli_e2e", "app_secret": "secret-e2e", "domain": "custom",
                               "custom_domain": lark.base_url, "enable-webhook": True,
                               "verification-token": lark.token, "encrypt-key": "",
                               "enable-stream-reply": stream_reply},
            "event_bindings": [{"event_pattern": "message.received", "target_type": "pipeline",
                                "target_uuid": pipeline, "filters": [], "priority": 0, "enabled": True}],
        }
        return str(self.data("POST", "/api/v1/platform/bots", json=body)["uuid"])

    def lark_webhook(self, bot: str, body: dict[str, Any]) -> httpx.Response:
        """POST a Lark event callback to the bot's webhook, as Lark's servers do."""
        assert self.client is not None
        return self.client.post(f"/bots/{bot}", json=body)

    def create_llm_model(self, model_name: str, *, base_url: str, api_key: str,
                         abilities: tuple[str, ...] = ("func_call",), context_length: int | None = None,
                         requester: str = "openai-chat-completions") -> str:
        """An OpenAI-compatible model provider at ``base_url`` and one LLM model on it, made as a bot
        owner does in the WebUI (``openai-chat-completions``: litellm provider ``openai``); returns
        the model's uuid (what a runner config's ``model`` names)."""
        provider = self.data("POST", "/api/v1/provider/providers", json={
            "name": f"e2e-{model_name}-{uuid.uuid4().hex[:6]}", "requester": requester,
            "base_url": base_url, "api_keys": [api_key]})["uuid"]
        body: dict[str, Any] = {"name": model_name, "provider_uuid": provider, "abilities": list(abilities),
                                "extra_args": {}}
        if context_length is not None:
            body["context_length"] = context_length
        return str(self.data("POST", "/api/v1/provider/models/llm", json=body)["uuid"])

    def insert_legacy_pipeline(self, name: str, ai: dict[str, Any], *, remove_think: bool | None = None) -> str:
        """A 4.10-style pipeline with the ``ai`` section given, written straight into SQLite (the API
        refuses legacy configs); the rest of its config is the default template's."""
        template = self.data("POST", "/api/v1/pipelines", json={"name": f"{name}-template"})["uuid"]
        pipeline = str(uuid.uuid4())
        with contextlib.closing(sqlite3.connect(self.db_path, timeout=30)) as db:
            db.row_factory = sqlite3.Row
            row = db.execute("SELECT * FROM legacy_pipelines WHERE uuid = ?", (template,)).fetchone()
            assert row is not None, "the template pipeline is not in legacy_pipelines"
            config = json.loads(row["config"])
            config["ai"] = ai
            if remove_think is not None:
                config["output"]["misc"]["remove-think"] = remove_think
            db.execute(
                "INSERT INTO legacy_pipelines (uuid, workspace_uuid, name, description, emoji, for_version,"
                " is_default, stages, config, extensions_preferences) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (pipeline, self.workspace, name, "", row["emoji"], "v4.10.8", 0, row["stages"],
                 json.dumps(config), row["extensions_preferences"]),
            )
            db.commit()
        return pipeline

    def migrate(self, pipeline: str) -> LegacyMigration:
        """Preview the legacy migration of ``pipeline`` and, when it is ``ready``, execute it."""
        items = self.data("GET", "/api/v1/pipelines/_/migration/preview")["items"]
        preview = next(i for i in items if i["pipeline_uuid"] == pipeline)
        task: dict[str, Any] = {}
        if preview["state"] == "ready":
            started = self.data("POST", "/api/v1/pipelines/_/migration/execute", json={
                "confirmed": True, "items": [{"pipeline_uuid": pipeline, "preview_token": preview["preview_token"]}],
            })
            task = self.wait_task(started["task_id"], "migration", 120)
        return LegacyMigration(pipeline, preview, task, self.stored_config(pipeline))

    def stored_config(self, pipeline: str) -> dict[str, Any]:
        """A pipeline's config as stored in SQLite."""
        with contextlib.closing(sqlite3.connect(self.db_path, timeout=30)) as db:
            (raw,) = db.execute("SELECT config FROM legacy_pipelines WHERE uuid = ?", (pipeline,)).fetchone()
        result: dict[str, Any] = json.loads(raw)
        return result

    def runs(self, conversation_id: str) -> list[dict[str, Any]]:
        """The run ledger rows of one conversation, oldest first (the monitoring API gives no run id
        for pipeline runs, so this reads the ``agent_run`` table)."""
        with contextlib.closing(sqlite3.connect(self.db_path, timeout=30)) as db:
            db.row_factory = sqlite3.Row
            rows = db.execute("SELECT * FROM agent_run WHERE conversation_id = ? ORDER BY id",
                              (conversation_id,)).fetchall()
        return [dict(row) for row in rows]

    def finished_run(self, conversation_id: str) -> dict[str, Any]:
        """The conversation's only run, once the host has finalised it."""
        def done() -> dict[str, Any] | None:
            rows = self.runs(conversation_id)
            assert len(rows) <= 1, f"more than one run for {conversation_id}: {rows}"
            return rows[0] if rows and rows[0]["status"] in RUN_TERMINAL else None

        return wait_for(f"the run of {conversation_id} to finish", done, 30, alive=self.alive)

    def run_events(self, run_id: str) -> list[dict[str, Any]]:
        return self.data("GET", f"/api/v1/monitoring/executions/agent/{run_id}", params={"section": "events"})["events"]

    def ensure_plugin(self, plugin: PluginInfo) -> float | None:
        """Install ``plugin`` unless this host already has it; the seconds the install took, or None."""
        if plugin.name in self.installed:
            return None
        took = self.install_plugin(plugin)
        self.installed[plugin.name] = took
        return took

    def reset_context(self, conversation_id: str, bot_id: str = WEBSOCKET_BOT) -> None:
        """What a bot owner's "reset context" does in the WebUI's monitoring sessions page
        (``POST /api/v1/monitoring/sessions/reset-context``): the runner's conversation state goes,
        the chat history stays. The WebUI websocket chat's runs all carry the bot id ``websocket-proxy-bot``."""
        got = self.data("POST", "/api/v1/monitoring/sessions/reset-context",
                        json={"bot_id": bot_id, "session_id": conversation_id})
        assert got.get("reset") is True, got

    def set_runner_config(self, pipeline: str, **changes: Any) -> None:
        """Change keys of a pipeline's runner config through the pipeline API, as the WebUI's form does."""
        current = self.data("GET", f"/api/v1/pipelines/{pipeline}")["pipeline"]
        config = current["config"]
        runner_id = config["ai"]["runner"]["id"]
        config["ai"]["runner_config"][runner_id].update(changes)
        self.api("PUT", f"/api/v1/pipelines/{pipeline}",
                 json={"name": current["name"], "description": current.get("description") or "", "config": config})

    def run_usage(self, run: dict[str, Any]) -> dict[str, Any] | None:
        """The token usage the run ledger holds for one run (an ``agent_run`` row)."""
        return json.loads(run["usage_json"]) if run.get("usage_json") else None


@dataclass
class LegacyMigration:
    """One legacy pipeline's migration: its preview item, the finished task (``{}`` when the preview
    was not ``ready``) and the pipeline's stored config afterwards."""

    pipeline: str
    preview: dict[str, Any]
    task: dict[str, Any]
    config: dict[str, Any]

    def runner_config(self, legacy_runner: str, plugin: PluginInfo) -> dict[str, Any]:
        """Assert the pipeline previewed ``ready`` for ``plugin``'s runner and was migrated to it with
        only keys the runner declares (plus the host fields); return the migrated runner config."""
        preview = self.preview
        assert preview["state"] == "ready", preview
        assert preview["legacy_runner"] == legacy_runner
        assert preview["target_runner_id"] == plugin.runner_id
        assert preview["blockers"] == []
        results = self.task["task_context"]["metadata"]["results"]
        assert results == [{"pipeline_uuid": self.pipeline, "state": "migrated", "code": None}], results
        ai = self.config["ai"]
        assert ai["runner"]["id"] == plugin.runner_id
        migrated: dict[str, Any] = ai["runner_config"][plugin.runner_id]
        undeclared = set(migrated) - {item["name"] for item in plugin.config_items} - HOST_FIELDS
        assert not undeclared, f"the migration wrote keys the runner does not declare: {undeclared}"
        return migrated


def _plugin_names(plugins: list[dict[str, Any]]) -> list[str]:
    names = []
    for p in plugins:
        meta = (p.get("manifest") or {}).get("manifest", {}).get("metadata") or p.get("metadata") or {}
        names.append(f"{meta.get('author', '?')}/{meta.get('name', '?')} {meta.get('version', '')}".strip())
    return names


def _port_free(port: int) -> bool:
    """Nothing listens on ``port`` (SO_REUSEADDR: leftover TIME_WAIT connections do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((LOOPBACK, port))
        except OSError:
            return False
    return True



# --- the WebUI websocket chat and the run ledger ----------------------------------------------------


@dataclass
class Chat:
    """One websocket turn: every frame the chat received after the message was sent, in order."""

    connection_id: str
    frames: list[dict[str, Any]]
    #: when each frame arrived, in seconds after the message was sent (empty when not measured)
    arrivals: list[float] = field(default_factory=list)

    @property
    def conversation_id(self) -> str:
        return f"person_websocket_{self.connection_id}"  # the host's conversation id for this connection

    @property
    def replies(self) -> list[dict[str, Any]]:
        """The ``data`` of every ``response`` frame ({id, content, is_final, ...})."""
        return [f["data"] for f in self.frames if f.get("type") == "response"]

    def shown(self) -> list[dict[str, Any]]:
        """The assistant messages as the chat shows them: a frame replaces the earlier ones with its id."""
        latest: dict[Any, dict[str, Any]] = {}
        for reply in self.replies:
            latest.pop(reply.get("id"), None)  # keep the order of the latest update
            latest[reply.get("id")] = reply
        return list(latest.values())

    def last_shown(self) -> dict[str, Any] | None:
        shown = self.shown()
        return shown[-1] if shown else None

    def final(self) -> dict[str, Any] | None:
        """The last frame that ends a message (``is_final``)."""
        return next((r for r in reversed(self.replies) if r.get("is_final")), None)

    def first_text_after(self) -> float | None:
        """Seconds from sending to the first response frame with text (the first token a user sees)."""
        return next((t for f, t in zip(self.frames, self.arrivals, strict=False)
                     if f.get("type") == "response" and f["data"].get("content")), None)

    def final_after(self) -> float | None:
        """Seconds from sending to the first frame that ends a message."""
        return next((t for f, t in zip(self.frames, self.arrivals, strict=False)
                     if f.get("type") == "response" and f["data"].get("is_final")), None)


@contextlib.contextmanager
def ws_session(host: Host, pipeline: str) -> Iterator[tuple[Any, str]]:
    """An authenticated WebUI websocket chat on ``pipeline``: (the socket, its connection id)."""
    from websockets.sync.client import connect

    api = host.ports["api"]
    url = f"ws://{LOOPBACK}:{api}/api/v1/pipelines/{pipeline}/ws/connect?session_type=person"
    # the host needs an Origin header on the websocket handshake (host-contract.md section 6)
    with connect(url, origin=f"http://{LOOPBACK}:{api}", proxy=None, open_timeout=15) as ws:
        ws.send(json.dumps({"type": "authenticate", "token": host.user_token, "workspace_uuid": host.workspace}))
        connected = json.loads(ws.recv(timeout=15))
        assert connected.get("type") == "connected", connected
        yield ws, connected["connection_id"]


def _send_text(ws: Any, text: str, stream: bool) -> None:
    ws.send(json.dumps({"type": "message", "message": [{"type": "Plain", "text": text}], "stream": stream}))


def ws_turns(host: Host, pipeline: str, texts: list[str], *, stream: bool = True, timeout: float = 45,
             settle: float = 2.0, between: Callable[[int], Any] | None = None,
             on_connect: Callable[[str], Any] | None = None) -> list[Chat]:
    """Send each of ``texts`` on one websocket connection (one conversation), each once the answer
    to the previous one has ended, and collect the frames of each answer. ``between(i)`` runs
    before text ``i`` (from the second on), e.g. to change the platform between two messages;
    ``on_connect`` is told the host's conversation id of the connection before the first text.

    Reading a turn stops ``settle`` seconds after the last frame once a final frame was seen (the
    host may still send its own failure notice after the runner's last message), or at ``timeout``.
    """
    chats = []
    with ws_session(host, pipeline) as (ws, connection_id):
        if on_connect is not None:
            on_connect(Chat(connection_id, []).conversation_id)
        for i, text in enumerate(texts):
            if i and between is not None:
                between(i)
            frames: list[dict[str, Any]] = []
            arrivals: list[float] = []
            sent = time.monotonic()
            _send_text(ws, text, stream)
            deadline = sent + timeout
            final_seen = False
            while time.monotonic() < deadline:
                wait = deadline - time.monotonic()
                try:
                    frame = json.loads(ws.recv(timeout=min(settle, wait) if final_seen else max(0.1, wait)))
                except TimeoutError:
                    break
                frames.append(frame)
                arrivals.append(time.monotonic() - sent)
                if frame.get("type") == "response" and frame["data"].get("is_final"):
                    final_seen = True
            chats.append(Chat(connection_id, frames, arrivals))
    return chats


def ws_chat(host: Host, pipeline: str, text: str, *, stream: bool = True, timeout: float = 45,
            settle: float = 2.0) -> Chat:
    """Send ``text`` over the pipeline's WebUI websocket and collect the frames of the answer."""
    return ws_turns(host, pipeline, [text], stream=stream, timeout=timeout, settle=settle)[0]


@dataclass
class RecordedFailure:
    status: str
    code: str | None
    retryable: bool | None
    usage: dict[str, Any] | None


def recorded_failure(host: Host, run: dict[str, Any]) -> RecordedFailure:
    """The failure the run ledger holds for one run (an ``agent_run`` row).

    Two shapes count. A run that ends in ``run.failed``: status ``failed``, code and ``retryable`` from
    that event. Or a run that ends in ``run.completed`` with the failure code as its
    ``finish_reason`` (the ledger's ``status_reason``) and ``retryable=<true|false>`` in a
    ``processor.log`` line: LangBot 4.11.2 puts its own generic line in a pipeline chat whenever a run
    ends in ``run.failed`` (over the runner's text when streaming; instead of it otherwise), so a
    pipeline run that must leave its own text in the chat cannot end in ``run.failed``.
    """
    events = host.run_events(run["run_id"])
    usage = host.run_usage(run)
    failed = [e for e in events if e["type"] == "run.failed"]
    if failed:
        data = failed[-1]["data"]
        assert run["status"] == "failed", run
        return RecordedFailure(run["status"], data.get("code"), data.get("retryable"), usage)
    completed = [e for e in events if e["type"] == "run.completed"]
    assert completed, f"the run ended in neither run.failed nor run.completed: {[e['type'] for e in events]}"
    code = completed[-1]["data"].get("finish_reason")
    assert run["status_reason"] == code, run
    logs = " ".join(str((e.get("data") or {}).get("text", "")) for e in events if e["type"] == "processor.log")
    found = re.search(r"retryable\W+(true|false)", logs, re.IGNORECASE)
    return RecordedFailure(run["status"], code, found.group(1).lower() == "true" if found else None, usage)


def frame_text(frame: dict[str, Any]) -> str:
    """The text an agent debug stream frame shows (its message, or its streamed chunk so far)."""
    data = (frame.get("data") or {}).get("data") or {}
    message = data.get("message") or data.get("chunk") or {}
    text = message.get("content") or message.get("all_content")
    return text if isinstance(text, str) else ""


def is_host_notice(text: str | None) -> bool:
    return (text or "").strip() in HOST_FAILURE_NOTICES


INCOMPLETE_WORDS = re.compile(r"incomplete|unfinished|not finished|cut off|interrupted|不完整", re.IGNORECASE)


def assert_chat_ends_with_own_text(chat: Chat) -> str:
    """The chat's last message is finished, and the host's generic failure line never showed."""
    notices = [r for r in chat.replies if is_host_notice(r.get("content"))]
    assert not notices, f"the host's generic failure line reached the chat: {chat.replies}"
    last = chat.last_shown()
    assert last is not None, f"nothing was shown: {chat.frames}"
    assert last["is_final"], f"the chat's last message never ended: {chat.replies}"
    return last["content"]


def assert_partial_answer_kept(chat: Chat, streamed: str) -> None:
    """The last message holds the streamed text, then a note on its own line that it is incomplete."""
    content = assert_chat_ends_with_own_text(chat)
    assert streamed in content, f"the streamed text is gone from the final message: {content!r}"
    after = content[content.index(streamed) + len(streamed):]
    assert after.startswith("\n") and after.strip(), f"no note on its own line after the streamed text: {content!r}"
    assert INCOMPLETE_WORDS.search(after), f"the note does not say the answer is incomplete: {after!r}"


def assert_failure_explained(chat: Chat, must_name: str) -> None:
    """One finished message explains the failure (naming ``must_name``) instead of the generic line."""
    content = assert_chat_ends_with_own_text(chat)
    assert must_name in content, f"the explanation does not name {must_name!r}: {content!r}"



def ws_conversation(host: Host, pipeline: str, messages: list[tuple[float, str]], *, stream: bool = True,
                    timeout: float = 60, settle: float = 3.0) -> Chat:
    """Send each ``(delay, text)`` on one websocket connection ``delay`` seconds after the previous
    one (while the first run is still going), and collect every frame until the chat is quiet."""
    frames: list[dict[str, Any]] = []
    with ws_session(host, pipeline) as (ws, connection_id):
        pending = list(messages)
        send_at = time.monotonic()
        deadline = time.monotonic() + timeout
        last_frame = time.monotonic()
        finals = 0
        while time.monotonic() < deadline:
            if pending and time.monotonic() >= send_at + pending[0][0]:
                _, text = pending.pop(0)
                _send_text(ws, text, stream)
                send_at = time.monotonic()
                continue
            wait = (send_at + pending[0][0] - time.monotonic()) if pending else settle
            try:
                frame = json.loads(ws.recv(timeout=max(0.05, min(wait, deadline - time.monotonic()))))
            except TimeoutError:
                if not pending and finals and time.monotonic() - last_frame >= settle:
                    break
                continue
            frames.append(frame)
            last_frame = time.monotonic()
            if frame.get("type") == "response" and frame["data"].get("is_final"):
                finals += 1
    return Chat(connection_id, frames)


def ws_dialogue(host: Host, pipeline: str, first: str, replies: list[tuple[str, str]], *, stream: bool = True,
                timeout: float = 90, settle: float = 3.0) -> Chat:
    """Send ``first``; then, for each ``(seen, text)`` in order, send ``text`` once a complete reply
    containing ``seen`` has arrived (a person answering the agent's question). Collects every frame
    until the chat is quiet."""
    frames: list[dict[str, Any]] = []
    with ws_session(host, pipeline) as (ws, connection_id):
        _send_text(ws, first, stream)
        pending = list(replies)
        deadline = time.monotonic() + timeout
        last_frame = time.monotonic()
        while time.monotonic() < deadline:
            try:
                frame = json.loads(ws.recv(timeout=max(0.05, min(settle, deadline - time.monotonic()))))
            except TimeoutError:
                if not pending and time.monotonic() - last_frame >= settle:
                    break
                continue
            frames.append(frame)
            last_frame = time.monotonic()
            data = frame.get("data") or {}
            if (pending and frame.get("type") == "response" and data.get("is_final")
                    and pending[0][0] in str(data.get("content") or "")):
                _send_text(ws, pending.pop(0)[1], stream)
    return Chat(connection_id, frames)


def run_inputs(host: Host, run_id: str) -> Any:
    """The run's journal section (what the host recorded as handed to the run, steering included)."""
    data = host.data("GET", f"/api/v1/monitoring/executions/agent/{run_id}", params={"section": "inputs"})
    return data



# --- a fake Lark Open API (../shared/recipes/fake_lark.py) for a lark-omni bot ---------------------

LARK_RECIPE = shared_dir() / "recipes" / "fake_lark.py"  # $RUNNERS_SHARED_DIR, or shared/ beside the repository


class FakeLark:
    """The shared fake Lark Open API on a free loopback port, in its own process (stopped by PID).

    It logs every call LangBot's lark-omni adapter makes (tokens, bot info, CardKit cards, messages)
    and answers with Lark's success shapes; :meth:`message` and :meth:`click` build the webhook
    events Lark would send for a user's text and a button click."""

    token = "vt-e2e"
    user = "ou_e2e_user"
    bot_open_id = "ou_bot"  # what the recipe's /open-apis/bot/v3/info answers: the bot's own open_id

    def __init__(self, root: Path):
        if not LARK_RECIPE.is_file():
            pytest.skip(f"the fake Lark API recipe is missing ({LARK_RECIPE.name} beside the repository)")
        self.port = free_port()
        self.log = root / "fake_lark.jsonl"
        self.log.write_text("")
        self.popen = subprocess.Popen([sys.executable, str(LARK_RECIPE), str(self.port), str(self.log)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.base_url = f"http://{LOOPBACK}:{self.port}"
        self._n = 0
        wait_for("the fake Lark API", lambda: not _port_free(self.port), 20)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=5)

    def calls(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def _header(self, event_type: str) -> dict[str, Any]:
        self._n += 1
        return {"event_id": f"ev-{uuid.uuid4().hex}", "token": self.token, "create_time": str(int(time.time() * 1000)),
                "event_type": event_type, "tenant_key": "tk-e2e", "app_id": "cli_e2e"}

    def message(self, text: str, *, sender: str | None = None, group: str | None = None) -> dict[str, Any]:
        """An ``im.message.receive_v1`` event: the user writes ``text`` to the bot in a private chat.

        With ``group`` (a chat id), member ``sender`` (an open_id, default :attr:`user`) writes it in
        that group chat, @-mentioning the bot first as Lark sends it (``@_user_1`` in the text, the
        bot in ``mentions``): LangBot's default group respond rule answers only a message that
        @-mentions the bot. LangBot 4.11.2 names a Lark sender by the ``union_id`` of the event
        (:meth:`member_name`)."""
        who = sender or self.user
        message: dict[str, Any] = {
            "message_id": f"om_in_{uuid.uuid4().hex[:12]}", "create_time": str(int(time.time() * 1000)),
            "chat_id": "oc_p2p", "chat_type": "p2p", "message_type": "text", "content": json.dumps({"text": text})}
        if group is not None:
            message.update(chat_id=group, chat_type="group", content=json.dumps({"text": f"@_user_1 {text}"}),
                           mentions=[{"key": "@_user_1", "name": "probe", "tenant_key": "tk-e2e",
                                      "mentioned_type": "bot",
                                      "id": {"open_id": self.bot_open_id, "union_id": "on_bot", "user_id": ""}}])
        return {"schema": "2.0", "header": self._header("im.message.receive_v1"), "event": {
            "sender": {"sender_id": {"open_id": who, "user_id": f"u_{who}" if sender else "u_e2e",
                                     "union_id": self.member_name(who)},
                       "sender_type": "user", "tenant_key": "tk-e2e"},
            "message": message}}

    def member_name(self, open_id: str) -> str:
        """The name LangBot 4.11.2 gives the sender ``open_id`` of :meth:`message` (the event's
        ``union_id``: the Lark adapter takes it as the sender's nickname)."""
        return "on_e2e" if open_id == self.user else "on_" + open_id.removeprefix("ou_")

    def click(self, value: dict[str, Any], message_id: str = "om_out_1", *, sender: str | None = None,
              group: str | None = None) -> dict[str, Any]:
        """A ``card.action.trigger`` event: the user clicks the button whose value is ``value``
        (in group chat ``group``: member ``sender`` clicks it)."""
        who = sender or self.user
        return {"schema": "2.0", "header": self._header("card.action.trigger"), "event": {
            "operator": {"open_id": who, "user_id": f"u_{who}" if sender else "u_e2e"},
            "action": {"tag": "button", "value": value},
            "context": {"open_message_id": message_id, "open_chat_id": group or "oc_p2p"}}}

    def buttons(self) -> list[tuple[str, dict[str, Any]]]:
        """``(label, callback value)`` of every interaction button in the cards LangBot sent."""
        found: list[tuple[str, dict[str, Any]]] = []

        def walk(node: Any) -> None:
            if isinstance(node, str) and node.startswith("{") and '"lbi"' in node:
                with contextlib.suppress(ValueError):
                    walk(json.loads(node))
                return
            if isinstance(node, dict):
                if node.get("tag") == "button":
                    for b in node.get("behaviors") or []:
                        if isinstance(b, dict) and isinstance(b.get("value"), dict) and "lbi" in b["value"]:
                            text = node.get("text") or {}
                            found.append((str(text.get("content") if isinstance(text, dict) else text), b["value"]))
                for v in node.values():
                    walk(v)
            elif isinstance(node, list):
                for v in node:
                    walk(v)

        for call in self.calls():
            walk(call.get("body"))
        return found

    def texts(self) -> list[str]:
        """Every text the bot sent or put on a card, in order (message bodies and card updates)."""
        out: list[str] = []
        for call in self.calls():
            body = call.get("body")
            out.append(json.dumps(body, ensure_ascii=False) if not isinstance(body, str) else body)
        return out


def working_in(directory: Path) -> list[int]:
    """Pids whose working directory is ``directory`` or below (orphaned tool shells included)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:
            continue
        if cwd == directory or directory in cwd.parents:
            found.append(int(entry.name))
    return found
