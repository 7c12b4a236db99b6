"""A real Dify 1.12.1 API server on loopback, for the DifyAgent real-peer suite.

No package registry ships the Dify server, and CI cannot fetch it: the source tree (the directory
holding Dify's ``api/``) is looked for in ``$DIFY_SOURCE`` or ``~/.cache/langbot-agent-runners/
dify-1.12.1-src``. In a session that can mirror a repository holding Dify's history
(``langgenius/dify``, or the smaller fork ``YFGaia/dify-plus``, which carries upstream's commits),
one command puts it there::

    uv run python -m tests.real_peers.dify_server <that repository's git directory>

It extracts ``api/`` at upstream commit ``cd03e0a9`` (the 1.12.1 hotfix head) and checks that
``api/pyproject.toml`` says 1.12.1. Nothing of Dify is kept in this repository.

What runs, all on free 127.0.0.1 ports and stopped by PID:

- PostgreSQL (Debian's ``postgresql``): a scratch cluster (``initdb``, trust auth), run in the
  foreground as the ``postgres`` user when the tests run as root;
- Redis (Debian's ``redis-server``), in the foreground, no persistence;
- Dify's API: ``uv sync --frozen --no-dev`` of ``api/uv.lock`` into ``$DIFY_VENV`` (default
  ``~/.cache/langbot-agent-runners/dify-1.12.1-venv``, about 2 GB, once), ``flask db upgrade``, then
  gunicorn with one gevent worker. No plugin daemon (its URL is a closed port: apps with model
  nodes cannot run, so there is no chatbot or agent app here), no code sandbox, no Celery worker,
  no vector store.

The apps come from ``dify_apps.py`` (our own DSL), imported, given keys and published through the
console API as an admin created by ``/console/api/setup``.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import glob
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.real_peers import peers

DIFY_VERSION = "1.12.1"
DIFY_COMMIT = "cd03e0a9ef7f2383853ace444e3aefe4fac05cde"  # upstream langgenius/dify, the 1.12.1 hotfix head
LABEL = "dify-real"
INSTALL_TIMEOUT = 1200.0
START_TIMEOUT = 180.0
PROVIDE_COMMAND = "uv run python -m tests.real_peers.dify_server <git directory of langgenius/dify or YFGaia/dify-plus>"
ADMIN = {"email": "owner@example.com", "name": "LangBot tests", "password": "Lb-real-peer-4711"}


def say(text: str) -> None:
    peers.say(LABEL, text)


def source_dir() -> Path:
    return peers.cached_path("DIFY_SOURCE", f"dify-{DIFY_VERSION}-src")


def venv_dir() -> Path:
    return peers.cached_path("DIFY_VENV", f"dify-{DIFY_VERSION}-venv")


def source_problem(src: Path | None = None) -> str | None:
    """Why the Dify source cannot be used (for the skip reason), or None when it can."""
    src = src or source_dir()
    pyproject = src / "api" / "pyproject.toml"
    if not pyproject.is_file():
        return (f"no Dify {DIFY_VERSION} source at {src} (or $DIFY_SOURCE): no registry ships the Dify server and "
                f"CI cannot fetch it; in a session that can mirror Dify's repository, run `{PROVIDE_COMMAND}`")
    try:
        version = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"]
    except (OSError, ValueError, KeyError) as exc:
        return f"{pyproject} is unreadable: {exc}"
    if version != DIFY_VERSION:
        return f"the Dify source at {src} is {version}, not {DIFY_VERSION}; run `{PROVIDE_COMMAND}`"
    if not (src / "api" / "uv.lock").is_file():
        return f"the Dify source at {src} has no api/uv.lock"
    return None


def provide_source(git_dir: Path, dest: Path | None = None) -> Path:
    """Extract ``api/`` at :data:`DIFY_COMMIT` from a git directory into the cache."""
    dest = dest or source_dir()
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "--git-dir", str(git_dir), "archive", DIFY_COMMIT, "api"],
                             capture_output=True, check=False)
    if archive.returncode != 0:
        raise SystemExit(f"git archive {DIFY_COMMIT} api failed: {archive.stderr.decode(errors='replace')[-500:]}")
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    problem = source_problem(dest)
    if problem:
        raise SystemExit(problem)
    return dest


# --- installs ----------------------------------------------------------------------------------


def _lock_key(api: Path) -> str:
    return hashlib.sha256((api / "uv.lock").read_bytes()).hexdigest()[:16]


def provide_venv() -> Path:
    """Dify's own locked dependencies in the cache venv (``uv sync --frozen --no-dev``), once."""
    problem = source_problem()
    if problem:
        pytest.skip(problem)
    api = source_dir() / "api"
    venv = venv_dir()
    marker = venv / "langbot-install-complete.json"
    key = _lock_key(api)
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f".{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with contextlib.suppress(OSError, ValueError):
            if json.loads(marker.read_text(encoding="utf-8")).get("key") == key and (venv / "bin" / "gunicorn").is_file():
                return venv
        uv = shutil.which("uv")
        if uv is None:
            pytest.skip(f"{LABEL}: `uv` is not installed")
        log = venv.parent / f"{venv.name}-install.log"
        say(f"installing Dify {DIFY_VERSION}'s dependencies into {venv} (about a minute, 2 GB); log: {log}")
        started = time.monotonic()
        env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(venv)}
        with open(log, "a", encoding="utf-8") as out:
            proc = subprocess.Popen([uv, "sync", "--frozen", "--no-dev", "--python", "3.11"], cwd=api, env=env,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            code = peers.wait_reporting(
                proc, started, INSTALL_TIMEOUT, progress=lambda t: say(f"  uv sync: still running ({t:.0f}s)"),
                give_up=lambda: pytest.skip(f"{LABEL}: uv sync did not finish within {INSTALL_TIMEOUT:.0f}s; see {log}"))
        if code != 0 or not (venv / "bin" / "gunicorn").is_file():
            pytest.skip(f"{LABEL}: uv sync of Dify's api/uv.lock failed (exit {code}); see {log}:\n{peers.tail(log)}")
        took = time.monotonic() - started
        marker.write_text(json.dumps({"key": key, "seconds": round(took, 1)}), encoding="utf-8")
        say(f"installed in {took:.0f}s")
        return venv


def _postgres_bin() -> Path | None:
    for name in ("initdb", "postgres"):
        found = shutil.which(name)
        if found and (Path(found).resolve().parent / "initdb").is_file():
            return Path(found).resolve().parent
    found_dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(found_dirs[-1]).parent if found_dirs else None


def provide_services() -> tuple[Path, str]:
    """PostgreSQL's bin directory and ``redis-server``: Debian's packages, installed when missing and
    this user may (root with apt-get), under a lock; otherwise the suite skips with the package names."""
    pg, redis = _postgres_bin(), shutil.which("redis-server")
    if pg and redis:
        return pg, redis
    missing = [name for name, found in (("postgresql", pg), ("redis-server", redis)) if not found]
    apt = shutil.which("apt-get")
    if os.geteuid() != 0 or apt is None:
        pytest.skip(f"{LABEL}: Debian packages {', '.join(missing)} are not installed (apt-get install {' '.join(missing)})")
    cache = peers.cached_path("DIFY_VENV", f"dify-{DIFY_VERSION}-venv").parent
    cache.mkdir(parents=True, exist_ok=True)
    log = cache / "dify-services-install.log"
    with open(cache / ".dify-services.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (_postgres_bin() and shutil.which("redis-server")):
            say(f"installing {' '.join(missing)} from Debian's packages; log: {log}")
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            with open(log, "a", encoding="utf-8") as out:
                done = subprocess.run([apt, "install", "-y", "--no-install-recommends", *missing], env=env,
                                      stdout=out, stderr=subprocess.STDOUT, timeout=900, check=False)
                if done.returncode != 0:  # the package lists may be missing on a fresh machine
                    subprocess.run([apt, "update"], env=env, stdout=out, stderr=subprocess.STDOUT, timeout=300,
                                   check=False)
                    subprocess.run([apt, "install", "-y", "--no-install-recommends", *missing], env=env,
                                   stdout=out, stderr=subprocess.STDOUT, timeout=900, check=False)
    pg, redis = _postgres_bin(), shutil.which("redis-server")
    if not (pg and redis):
        pytest.skip(f"{LABEL}: apt-get install {' '.join(missing)} did not provide them; see {log}:\n{peers.tail(log)}")
    return pg, redis


# --- the running server ------------------------------------------------------------------------


@dataclass
class App:
    name: str
    mode: str
    app_id: str
    key: str


@dataclass
class Dify:
    """A running Dify API and the apps provisioned in it."""

    base: str  # http://127.0.0.1:<port>
    log: Path
    console: httpx.Client
    apps: dict[str, App] = field(default_factory=dict)

    @property
    def api(self) -> str:
        return self.base + "/v1"

    def service(self, app: str) -> httpx.Client:
        """A Service API client with ``app``'s key (for checking what the plugin did)."""
        return httpx.Client(base_url=self.api, headers={"Authorization": f"Bearer {self.apps[app].key}"}, timeout=30)

    def console_get(self, path: str, **params: Any) -> Any:
        r = self.console.get(path, params=params)
        r.raise_for_status()
        return r.json()

    def import_app(self, name: str, dsl: dict[str, Any], *, publish: bool = True) -> App:
        r = self._post("/console/api/apps/imports", {"mode": "yaml-content", "yaml_content": json.dumps(dsl, ensure_ascii=False)})
        doc = r.json()
        if doc.get("status") != "completed" or not doc.get("app_id"):
            pytest.fail(f"{LABEL}: importing app {name} gave {r.status_code} {r.text[:500]}")
        app_id = doc["app_id"]
        key = self._post(f"/console/api/apps/{app_id}/api-keys", {}).json()["token"]
        if publish and dsl["app"]["mode"] in ("workflow", "advanced-chat"):
            self._post(f"/console/api/apps/{app_id}/workflows/publish", {})
        app = App(name=name, mode=dsl["app"]["mode"], app_id=app_id, key=key)
        self.apps[name] = app
        return app

    def _post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        r = self.console.post(path, json=body)
        if r.status_code >= 400:
            pytest.fail(f"{LABEL}: POST {path} gave {r.status_code}: {r.text[:500]}")
        return r


def _owned_by_postgres(path: Path) -> None:
    if os.geteuid() == 0:
        shutil.chown(path, "postgres", "postgres")


def _spawn(args: list[str], log: Path, *, cwd: Path | None = None, env: dict[str, str] | None = None,
           as_postgres: bool = False) -> subprocess.Popen[bytes]:
    out = open(log, "a", encoding="utf-8")  # noqa: SIM115 - the child holds it; closed when we return
    try:
        extra: dict[str, Any] = {"user": "postgres", "group": "postgres"} if as_postgres and os.geteuid() == 0 else {}
        return subprocess.Popen(args, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                **extra)
    finally:
        out.close()


def _run(args: list[str], log: Path, what: str, *, cwd: Path | None = None, env: dict[str, str] | None = None,
         as_postgres: bool = False, timeout: float = 300) -> None:
    proc = _spawn(args, log, cwd=cwd, env=env, as_postgres=as_postgres)
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        peers.stop_group(proc, grace=5)
        pytest.fail(f"{LABEL}: {what} did not finish within {timeout:.0f}s:\n{peers.tail(log, 30)}")
    if code != 0:
        pytest.fail(f"{LABEL}: {what} failed (exit {code}):\n{peers.tail(log, 30)}")


def _wait_port(proc: subprocess.Popen[bytes], port: int, log: Path, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{LABEL}: {what} exited with {proc.returncode}:\n{peers.tail(log, 30)}")
        with contextlib.suppress(OSError), socket.create_connection((peers.LOOPBACK, port), timeout=1):
            return
        time.sleep(0.1)
    pytest.fail(f"{LABEL}: {what} did not listen on {port} within {timeout:.0f}s:\n{peers.tail(log, 30)}")


def _stop(proc: subprocess.Popen[bytes] | None, sig: int = signal.SIGTERM, grace: float = 20) -> None:
    """Stop one server by its PID (``sig`` first: PostgreSQL's fast shutdown is SIGINT), then its group."""
    if proc is None:
        return
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    peers.stop_group(proc, grace=5)


@contextlib.contextmanager
def running_dify(apps: dict[str, dict[str, Any]], unpublished: tuple[str, ...] = ()):
    """PostgreSQL, Redis and the Dify API, with ``apps`` (name → DSL) imported; all stopped on exit."""
    venv = provide_venv()
    pg_bin, redis_bin = provide_services()
    api = source_dir() / "api"
    work = Path(tempfile.mkdtemp(prefix="dify-real-"))
    work.chmod(0o755)  # the postgres user reaches its data directory through it
    log = work / "dify.log"
    procs: list[tuple[subprocess.Popen[bytes], int]] = []
    console: httpx.Client | None = None
    timings: dict[str, float] = {}
    try:
        started = time.monotonic()
        pg_data, pg_sock = work / "pg", work / "pg-socket"
        for d in (pg_data, pg_sock):
            d.mkdir()
            _owned_by_postgres(d)
        pg_log = work / "postgres.log"
        pg_log.touch()
        _owned_by_postgres(pg_log)
        _run([str(pg_bin / "initdb"), "-D", str(pg_data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"],
             pg_log, "initdb", as_postgres=True)
        pg_port = peers.free_port()
        pg = _spawn([str(pg_bin / "postgres"), "-D", str(pg_data), "-p", str(pg_port), "-k", str(pg_sock),
                     "-c", f"listen_addresses={peers.LOOPBACK}", "-c", "fsync=off", "-c", "synchronous_commit=off",
                     "-c", "full_page_writes=off"], pg_log, as_postgres=True)
        procs.append((pg, signal.SIGINT))
        _wait_port(pg, pg_port, pg_log, "PostgreSQL")
        for _ in range(50):  # listening comes a moment before accepting connections
            done = subprocess.run([str(pg_bin / "createdb"), "-h", peers.LOOPBACK, "-p", str(pg_port), "-U", "postgres",
                                   "dify"], capture_output=True, text=True, check=False)
            if done.returncode == 0:
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"{LABEL}: createdb failed: {done.stderr[-500:]}")
        redis_port = peers.free_port()
        redis_log = work / "redis.log"
        redis = _spawn([redis_bin, "--bind", peers.LOOPBACK, "--port", str(redis_port), "--save", "", "--appendonly",
                        "no", "--dir", str(work), "--daemonize", "no"], redis_log)
        procs.append((redis, signal.SIGTERM))
        _wait_port(redis, redis_port, redis_log, "Redis")
        timings["services_s"] = time.monotonic() - started

        port = peers.free_port()
        base = f"http://{peers.LOOPBACK}:{port}"
        storage = work / "storage"
        storage.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy") and not k.startswith("VIRTUAL_ENV")}
        env.update({
            "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            "FLASK_APP": "app.py",
            "SECRET_KEY": secrets.token_urlsafe(32),
            "DEPLOY_ENV": "PRODUCTION",
            "LOG_LEVEL": "WARNING",
            "DB_TYPE": "postgresql", "DB_HOST": peers.LOOPBACK, "DB_PORT": str(pg_port), "DB_USERNAME": "postgres",
            "DB_PASSWORD": "", "DB_DATABASE": "dify",
            "REDIS_HOST": peers.LOOPBACK, "REDIS_PORT": str(redis_port), "REDIS_PASSWORD": "", "REDIS_USERNAME": "",
            "REDIS_DB": "0", "CELERY_BROKER_URL": f"redis://{peers.LOOPBACK}:{redis_port}/1",
            "STORAGE_TYPE": "opendal", "OPENDAL_SCHEME": "fs", "OPENDAL_FS_ROOT": str(storage),
            # no plugin daemon here: a closed port (Dify logs two errors when it names a conversation)
            "PLUGIN_DAEMON_URL": f"http://{peers.LOOPBACK}:{peers.free_port()}", "PLUGIN_DAEMON_KEY": "unused",
            "MARKETPLACE_ENABLED": "false", "CHECK_UPDATE_URL": "",
            "CONSOLE_API_URL": base, "CONSOLE_WEB_URL": base, "SERVICE_API_URL": base, "APP_WEB_URL": base,
            "FILES_URL": base, "INTERNAL_FILES_URL": base,
            "MIGRATION_ENABLED": "false", "VECTOR_STORE": "", "NO_PROXY": "*",
        })
        started = time.monotonic()
        _run([str(venv / "bin" / "flask"), "db", "upgrade"], log, "flask db upgrade", cwd=api, env=env, timeout=300)
        timings["migrate_s"] = time.monotonic() - started
        started = time.monotonic()
        gunicorn = _spawn([str(venv / "bin" / "gunicorn"), "--bind", f"{peers.LOOPBACK}:{port}", "--workers", "1",
                           "--worker-class", "gevent", "--timeout", "300", "--pid", str(work / "gunicorn.pid"),
                           "app:app"], log, cwd=api, env=env)
        procs.append((gunicorn, signal.SIGTERM))
        timings["start_s"] = peers.wait_until_up(gunicorn, base + "/console/api/setup", log, LABEL, START_TIMEOUT)

        console = httpx.Client(base_url=base, timeout=60, trust_env=False)
        if console.get("/console/api/setup").json().get("step") != "finished":
            r = console.post("/console/api/setup", json=ADMIN)
            if r.status_code >= 400:
                pytest.fail(f"{LABEL}: setup gave {r.status_code}: {r.text[:500]}")
        password = base64.b64encode(ADMIN["password"].encode()).decode()
        r = console.post("/console/api/login", json={"email": ADMIN["email"], "password": password})
        if r.status_code != 200 or not console.cookies.get("access_token"):
            pytest.fail(f"{LABEL}: console login gave {r.status_code}: {r.text[:500]}")
        # every console call, reads included, carries the CSRF cookie's value as a header
        console.headers["X-CSRF-Token"] = console.cookies.get("csrf_token") or ""
        dify = Dify(base=base, log=log, console=console)
        for name, dsl in apps.items():
            dify.import_app(name, dsl, publish=name not in unpublished)
        say(f"Dify {DIFY_VERSION} at {base} (services {timings['services_s']:.1f}s, migrations "
            f"{timings['migrate_s']:.1f}s, API up after {timings['start_s']:.1f}s; {len(apps)} apps)")
        yield dify
    finally:
        if console is not None:
            console.close()
        for proc, sig in reversed(procs):
            _stop(proc, sig)
        if os.environ.get("DIFY_KEEP_WORKDIR"):
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.split("\n\n")[1] if __doc__ else "", file=sys.stderr)
        print(f"usage: {PROVIDE_COMMAND}", file=sys.stderr)
        return 2
    dest = provide_source(Path(argv[0]).expanduser().resolve())
    print(f"Dify {DIFY_VERSION} source (api/ at {DIFY_COMMIT[:10]}) is in {dest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
