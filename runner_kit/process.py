"""Child processes for coding-agent runners (Claude Code, Codex, ACP agents).

What every CLI runner needs, once: an explicit environment (an allow-list of the host's variables
plus what the run configures — the plugin's own secrets and the runtime's control token never reach
the child), a private HOME per workspace that is reused, a per-conversation workspace, bounded line
reading of stdout, a stderr tail for error messages, and a stop that leaves nothing behind.

Stopping (real-peers.md §6): tool shells started by the agents ``setsid`` away and survive both a
SIGTERM to the agent and a kill of its process group. In a sandbox (:mod:`runner_kit.sandbox`) the
agent runs in its own PID namespace: signals go to the agent itself, and killing bwrap ends the
namespace and everything in it, however it was started. Unconfined, :meth:`AgentProcess.stop`
records every descendant from ``/proc`` *before* each signal, escalates SIGINT (optional) → SIGTERM
→ SIGKILL, and finally SIGKILLs every process it ever recorded that is still alive and every process
that still carries its tag in its environment (an orphan re-parented away from the tree).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import json
import os
import secrets
import shutil
import signal
import time
from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import RunnerError
from .logs import get_logger

if TYPE_CHECKING:
    from .runner import RunEnv
    from .sandbox import Boundary

log = get_logger("runner_kit.process")

DEFAULT_ENV_ALLOW: tuple[str, ...] = (
    "PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TZ", "TMPDIR", "TERM",
    "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
    "USER", "LOGNAME", "SHELL",
)
DEFAULT_LINE_LIMIT = 16 * 1024 * 1024
STDERR_TAIL_CHARS = 16384
DATA_ENV = "RUNNER_KIT_DATA_DIR"
TAG_ENV = "RUNNER_KIT_PROCESS_TAG"  # marks every process an unconfined agent starts (see AgentProcess.stop)


def child_env(
    extra: Mapping[str, str] | None = None,
    *,
    home: str | Path | None = None,
    allow: Iterable[str] = DEFAULT_ENV_ALLOW,
) -> dict[str, str]:
    """The child's whole environment: allow-listed host variables, then ``extra``, then HOME."""
    env = {k: os.environ[k] for k in allow if k in os.environ}
    env.setdefault("PATH", os.defpath)
    for key, value in (extra or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[str(key)] = str(value)
    if home is not None:
        env["HOME"] = str(home)
    return env


def parse_env_setting(raw: Any, key: str = "env") -> dict[str, str]:
    """The ``env`` config value: a JSON object, a mapping, or ``NAME=value`` lines."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, Mapping):
        items = dict(raw)
    else:
        text = str(raw).strip()
        items = {}
        if text.startswith("{"):
            try:
                loaded = json.loads(text)
            except ValueError:
                raise RunnerError("config.invalid", f"`{key}` is not valid JSON") from None
            if not isinstance(loaded, dict):
                raise RunnerError("config.invalid", f"`{key}` must be a JSON object of NAME: value")
            items = loaded
        else:
            for n, line in enumerate(text.splitlines(), 1):
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                name, sep, value = line.partition("=")
                if not sep:
                    raise RunnerError("config.invalid", f"`{key}` line {n} is not NAME=value")
                items[name.strip()] = value
    out: dict[str, str] = {}
    for name, value in items.items():
        name = str(name).strip()
        if not name or "=" in name or "\0" in name or not name.replace("_", "a").isalnum():
            raise RunnerError("config.invalid", f"`{key}` has an invalid variable name {name!r}")
        out[name] = "" if value is None else str(value)
    return out


def data_root(environ: Mapping[str, str] = os.environ) -> Path:
    """Where every plugin keeps its writable data, as a process with ``environ`` sees it:
    ``RUNNER_KIT_DATA_DIR``, else ``$XDG_DATA_HOME/langbot-agent-runners``, else
    ``~/.local/share/langbot-agent-runners`` (what a LangBot plugin worker, started with an empty
    environment, uses). ``~`` is that process's home: ``$HOME`` in ``environ``, else the user's home
    from the password database, as ``os.path.expanduser`` finds it without ``$HOME``."""
    root = environ.get(DATA_ENV) or os.path.join(
        environ.get("XDG_DATA_HOME") or os.path.join(_home(environ), ".local", "share"), "langbot-agent-runners"
    )
    if root.startswith("~"):
        root = os.path.join(_home(environ), root[2:] if root.startswith("~/") else root[1:])
    return Path(root)


def _home(environ: Mapping[str, str]) -> str:
    if environ.get("HOME"):
        return environ["HOME"]
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:  # a uid with no entry: what expanduser falls back to
        return os.path.expanduser("~")


def data_dir(platform: str) -> Path:
    """This plugin's writable data directory (the plugin's code directory is read-only in LangBot)."""
    path = data_root() / _safe(platform)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name) or "runner"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def workspace_dir(env: RunEnv, configured: str | None, platform: str, *, key: str = "workspace") -> Path:
    """The agent's working directory: the configured one, or one per conversation (same every run)."""
    if configured and str(configured).strip():
        path = Path(os.path.expandvars(str(configured).strip())).expanduser()
        if not path.is_absolute():
            raise RunnerError("config.invalid", f"`{key}` must be an absolute directory path")
    else:
        path = data_dir(platform) / "workspaces" / _digest(_conversation_scope(env))
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunnerError("config.invalid", f"`{key}` {path} cannot be created ({exc.strerror})") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise RunnerError("config.invalid", f"`{key}` {path} is not writable")
    return path


def _conversation_scope(env: RunEnv) -> str:
    """Who shares a workspace: one LangBot conversation of one bot (per person when the identity
    mode gives each person their own upstream session)."""
    ctx = env.ctx
    conv = getattr(ctx, "conversation", None)
    context = getattr(ctx, "context", None)
    cid = (getattr(conv, "conversation_id", None) or getattr(context, "conversation_id", None)) or ""
    bot = getattr(conv, "bot_id", None) or ""
    workspace = getattr(conv, "workspace_id", None) or ""
    return "\x1f".join(("workspace/1", str(workspace), str(bot), str(cid), env.session.key or "", env.user if not cid else ""))


def private_home(platform: str, workspace: Path) -> Path:
    """A HOME (or CODEX_HOME) for the agent, one per workspace, reused across runs."""
    path = data_dir(platform) / "homes" / _digest(str(workspace.resolve()))
    path.mkdir(parents=True, exist_ok=True)
    return path


def safe_file_name(name: str | None, fallback: str = "attachment") -> str:
    """A chat attachment's name made safe to create in a directory: its last path part only, letters
    (any script), digits and ``-_. `` kept, no leading dot, at most 100 characters and
    :data:`NAME_BYTES` bytes (a file system's limit is 255 bytes, and a Chinese character takes 3),
    cut in its stem so that the extension stays."""
    base = str(name or "").replace("\\", "/").rsplit("/", 1)[-1]
    kept = "".join(c if c.isalnum() or c in "-_. " else "_" for c in base).strip().lstrip(".")
    stem, dot, ext = kept.rpartition(".")
    if not dot or not stem or len(ext) > 16:
        stem, ext = kept, ""
    ext = "." + ext if ext else ""
    while stem and (len(stem) + len(ext) > 100 or len((stem + ext).encode()) > NAME_BYTES):
        stem = stem[:-1]
    return (stem.strip() + ext if stem.strip() else kept[:16].strip()) or fallback


NAME_BYTES = 200  # room left for the "999-" (or "0123abcd-") put before a name already taken


def save_attachment(workspace: Path, subdir: str, name: str | None, data: bytes) -> Path:
    """Write a file from the chat into ``workspace/subdir`` for the agent to read, under a safe name
    that never replaces an existing file and never follows a symlink: the agent may have turned the
    folder or a name in it into a link to somewhere else on the host."""
    if not subdir or "/" in subdir or subdir in (".", ".."):
        raise ValueError(f"subdir must be one folder name, not {subdir!r}")
    root = workspace.resolve()
    folder = root / subdir
    stem = safe_file_name(name)
    try:
        folder.mkdir(exist_ok=True)
        try:
            # held open, and never through a link: the agent may swap the folder for a link between
            # a check and the write (a follow-up message is saved while its tools run)
            dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise RunnerError("input.unreadable", f"{folder.name} in the workspace is not a plain folder; "
                                                      "the attachment was not saved") from None
            raise
        try:
            # the name, then "1-" to "999-" before it, then random prefixes (a long conversation may
            # send "image.png" a thousand times: the next one must still be saved)
            for n in range(1010):
                candidate = stem if n == 0 else f"{n}-{stem}" if n < 1000 else f"{secrets.token_hex(4)}-{stem}"
                try:
                    fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644,
                                 dir_fd=dir_fd)
                except FileExistsError:
                    continue
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                return folder / candidate
        finally:
            os.close(dir_fd)
    except OSError as exc:
        raise RunnerError("input.unreadable",
                          f"could not save {stem} into the workspace ({exc.strerror or exc})") from None
    raise RunnerError("input.unreadable", f"too many files named {stem} in the workspace")


def find_executable(value: str | None, default: str, *, key: str = "executable", hint: str = "") -> str:
    """The program to start: the configured path or name, else ``default`` on PATH."""
    wanted = str(value).strip() if value else default
    expanded = os.path.expanduser(wanted)
    found = expanded if os.sep in expanded else shutil.which(expanded)
    if found and os.path.isfile(found) and os.access(found, os.X_OK):
        return found
    where = "is not an executable file" if os.sep in expanded else "was not found on PATH"
    raise RunnerError("process.not_found", f"{wanted} {where}: set `{key}` to the program's path{hint}")


# --- process tree -------------------------------------------------------------------------------


def _proc_files(name: str) -> Iterable[tuple[int, bytes]]:
    """``(pid, content of /proc/<pid>/<name>)`` for every process this user may read."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/{name}", "rb") as fh:
                yield int(entry.name), fh.read()
        except OSError:
            continue


def _ppids() -> dict[int, int]:
    out: dict[int, int] = {}
    for pid, stat in _proc_files("stat"):
        # pid (comm) state ppid ... — comm may contain spaces and parentheses
        rest = stat[stat.rfind(b")") + 2 :].split()
        if len(rest) > 1:
            out[pid] = int(rest[1])
    return out


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for child, parent in _ppids().items():
        children.setdefault(parent, []).append(child)
    return children


def descendants(pid: int) -> set[int]:
    """Every live descendant of ``pid`` (children, grandchildren, …), from /proc."""
    children = _children()
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read()
    except OSError:
        return False
    rest = stat[stat.rfind(b")") + 2 :].split()
    return bool(rest) and rest[0] not in (b"Z", b"X")


def _kill(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


class AgentProcess:
    """One running agent CLI: JSON lines in and out, a stderr tail, and a clean stop."""

    def __init__(self, proc: asyncio.subprocess.Process, name: str, redact: Any = None, *,
                 confined: bool = False, tag: str | None = None):
        self._proc = proc
        self.name = name
        self.pid: int = proc.pid  # bwrap's pid in a sandbox (its end ends everything in it)
        self.confined = confined
        self._tag = tag
        self._agent_pid: int | None = None if confined else proc.pid
        assert proc.stdout is not None
        self.reader: asyncio.StreamReader = proc.stdout
        self.writer: asyncio.StreamWriter | None = proc.stdin
        self._stderr: deque[str] = deque()
        self._stderr_len = 0
        self._redact = redact
        self._seen: set[int] = set()
        self._stopped = False
        self._stderr_task = asyncio.get_running_loop().create_task(self._read_stderr())

    @classmethod
    async def spawn(
        cls,
        argv: Sequence[str],
        *,
        cwd: str | Path,
        env: Mapping[str, str],
        name: str,
        stdin: bool = True,
        line_limit: int = DEFAULT_LINE_LIMIT,
        redact: Any = None,
        boundary: Boundary | None = None,
    ) -> AgentProcess:
        """Start ``argv`` in its own session (inside ``boundary`` when it is confined); raises
        ``process.not_found`` when it cannot start."""
        env = dict(env)
        tag = None
        if boundary is not None and boundary.confined:
            argv, env = boundary.wrap(argv, env)
        else:
            tag = env[TAG_ENV] = os.urandom(12).hex()
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=str(cwd),
                env=env,
                stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                limit=line_limit,
                # a plugin process started with SIGINT ignored (a background job of a shell without job
                # control, some supervisors) would pass that on to every agent: its interrupt would do nothing
                preexec_fn=_default_signals if _ignored_signals() else None,
            )
        except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
            raise RunnerError(
                "process.not_found", f"{name} could not be started: {argv[0]} ({exc.strerror or exc})"
            ) from None
        log.debug("%s started (pid %s%s)", name, proc.pid, ", sandboxed" if tag is None else "")
        return cls(proc, name, redact, confined=tag is None, tag=tag)

    # --- output -------------------------------------------------------------------------------

    async def _read_stderr(self) -> None:
        err = self._proc.stderr
        if err is None:
            return
        with contextlib.suppress(Exception):
            while chunk := await err.read(4096):
                text = chunk.decode("utf-8", "replace")
                self._stderr.append(text)
                self._stderr_len += len(text)
                while self._stderr_len > STDERR_TAIL_CHARS and len(self._stderr) > 1:
                    self._stderr_len -= len(self._stderr.popleft())

    def stderr_tail(self, chars: int = 2000) -> str:
        """The end of what the process wrote to stderr (secrets redacted)."""
        text = "".join(self._stderr)[-chars:].strip()
        return self._redact(text) if self._redact is not None else text

    async def lines(self) -> AsyncIterator[bytes]:
        """stdout lines without the newline; a line over the limit is skipped with a warning."""
        while True:
            try:
                line = await self.reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:
                if exc.partial.strip():
                    yield exc.partial.rstrip(b"\r")
                return
            except asyncio.LimitOverrunError as exc:
                await self._skip_long_line(exc.consumed)
                continue
            except ValueError:  # the reader's own limit error wraps LimitOverrunError
                await self._skip_long_line(0)
                continue
            yield line[:-1].rstrip(b"\r")

    async def _skip_long_line(self, consumed: int) -> None:
        log.warning("%s wrote a line longer than the limit; skipped it", self.name)
        while True:
            try:
                await self.reader.readuntil(b"\n")
                return
            except asyncio.LimitOverrunError as exc:
                await self.reader.readexactly(max(exc.consumed, 1))
            except asyncio.IncompleteReadError:
                return
            except ValueError:
                await self.reader.read(1 << 16)

    async def read_json(self) -> dict[str, Any] | None:
        """The next JSON object line; other lines are logged and skipped. None at end of output."""
        async for line in self.lines():
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                log.info("%s: ignored a line that is not JSON: %.200s", self.name, line.decode("utf-8", "replace"))
                continue
            if isinstance(obj, dict):
                return obj
            log.info("%s: ignored a JSON line that is not an object", self.name)
        return None

    # --- input --------------------------------------------------------------------------------

    async def send_json(self, obj: Any) -> None:
        """Write one JSON line to the process's stdin."""
        data = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        await self.send_bytes(data)

    async def send_bytes(self, data: bytes) -> None:
        if self.writer is None or self.writer.is_closing() or self.returncode is not None:
            raise self.exit_error("is not running any more")
        try:
            self.writer.write(data)
            await self.writer.drain()
        except (BrokenPipeError, ConnectionResetError):
            raise self.exit_error("closed its input") from None

    # --- state --------------------------------------------------------------------------------

    @property
    def returncode(self) -> int | None:
        """The agent's exit code; negative: killed by that signal (bwrap reports an agent killed by
        a signal as 128 + the signal, as a shell does)."""
        rc = self._proc.returncode
        if rc is not None and self.confined and 128 < rc < 128 + 65:
            return -(rc - 128)
        return rc

    async def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the process to exit; its return code, or None on timeout."""
        try:
            await asyncio.wait_for(self._proc.wait(), timeout)
        except TimeoutError:
            return None
        return self.returncode

    def exit_error(self, what: str | None = None) -> RunnerError:
        """The failure to report for a process that ended (or cannot be used) unexpectedly."""
        rc = self.returncode
        tail = self.stderr_tail(600)
        if rc is not None and rc < 0:
            try:
                sig = signal.Signals(-rc).name
            except ValueError:
                sig = f"signal {-rc}"
            head = f"{self.name} was killed by {sig}"
            code = "process.crashed"
        elif rc is not None:
            head = f"{self.name} exited with code {rc}"
            code = "process.exited"
        else:
            head = f"{self.name} {what or 'stopped answering'}"
            code = "process.exited"
        if what and rc is not None:
            head += f" ({what})"
        return RunnerError(code, f"{head}: {tail}" if tail else head)

    def agent_pid(self) -> int | None:
        """The agent program's own pid (in a sandbox: the process bwrap's init started)."""
        if self._agent_pid is None and self.returncode is None:
            self._agent_pid = _payload(self.pid)
        return self._agent_pid

    def send_signal(self, sig: int) -> None:
        """Signal the agent process itself (e.g. SIGINT, the CLIs' own interrupt)."""
        if self.returncode is None:
            self._record()
            target = self.agent_pid()
            if target is not None:
                _kill(target, sig)

    def _record(self) -> None:
        try:
            self._seen |= descendants(self.pid)
        except OSError:
            pass

    async def stop(self, *, interrupt: bool = False, grace: float = 2.0) -> None:
        """Stop the process and every descendant it started; never raises; safe to call twice."""
        try:
            await self._stop(interrupt, grace)
        except BaseException as exc:  # noqa: BLE001 - a stop must not fail, even when cancelled
            self._kill_all()
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            if not self._stderr_task.done():
                self._stderr_task.cancel()

    async def _stop(self, interrupt: bool, grace: float) -> None:
        if self._stopped:
            self._kill_all()
            return
        self._stopped = True
        if self.returncode is None:
            self._record()
            if interrupt:
                self.send_signal(signal.SIGINT)
                await self.wait(grace)
        if self.writer is not None and not self.writer.is_closing():
            with contextlib.suppress(Exception):
                self.writer.close()
        if self.returncode is None:
            self._record()
            self.send_signal(signal.SIGTERM)
            if await self.wait(grace) is None:
                self._record()
                _kill(self.pid, signal.SIGKILL)
                await self.wait(grace)
        self._kill_all()
        if self.writer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.writer.wait_closed(), 0.5)

    def _kill_all(self) -> None:
        """SIGKILL the process and every descendant ever recorded that still runs."""
        if self.returncode is None:
            self._record()
            _kill(self.pid, signal.SIGKILL)
        if self._tag is not None:
            self._seen |= tagged(self._tag)
        for _ in range(3):
            left = {p for p in self._seen if alive(p)}
            if self._tag is not None:
                left |= tagged(self._tag)
            for pid in left:
                self._seen |= _safe_descendants(pid)
                _kill(pid, signal.SIGKILL)
            if not left:
                break
            time.sleep(0.01)

    async def __aenter__(self) -> AgentProcess:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def tagged(tag: str) -> set[int]:
    """Live processes whose environment carries ``TAG_ENV=tag`` (those this user may read)."""
    needle = f"{TAG_ENV}={tag}".encode()
    me = os.getpid()
    return {pid for pid, environ in _proc_files("environ")
            if pid != me and needle in environ.split(b"\0") and alive(pid)}


_INTERRUPTS = (signal.SIGINT, signal.SIGQUIT)


def _ignored_signals() -> bool:
    """Whether this process ignores an interrupt signal its agents must be able to receive."""
    try:
        return any(signal.getsignal(s) == signal.SIG_IGN for s in _INTERRUPTS)
    except (ValueError, OSError):
        return False


def _default_signals() -> None:
    """In the agent's process, before it runs: interrupt signals back to their defaults (an ignored
    disposition survives exec, and a shell cannot even trap a signal ignored when it started)."""
    for s in _INTERRUPTS:
        try:
            signal.signal(s, signal.SIG_DFL)
        except (ValueError, OSError):
            pass


def _program(pid: int) -> str:
    """The program a process runs: its executable's name, or (where the link cannot be read, e.g.
    for a process another namespace made undumpable) the kernel's name for it."""
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return ""


def _payload(bwrap_pid: int) -> int | None:
    """The first process under bwrap (and its init) that is not bwrap itself."""
    try:
        children = _children()
    except OSError:
        return None
    todo = [bwrap_pid]
    while todo:
        for child in sorted(children.get(todo.pop(0), ())):
            if _program(child) == "bwrap":
                todo.append(child)
            else:
                return child
    return None


def _safe_descendants(pid: int) -> set[int]:
    try:
        return descendants(pid)
    except OSError:
        return set()
