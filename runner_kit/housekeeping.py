"""Bounded disk use for coding-agent workspaces: what a conversation idle for days leaves behind goes.

Every conversation of a coding-agent runner gets a workspace ``data_dir(platform)/workspaces/<digest>``
and a private HOME ``data_dir(platform)/homes/<key>`` (:mod:`runner_kit.process`), where ``key`` is
the digest of the workspace's resolved path; the HOME holds the agent's session store. Without this
module nothing ever removes them.

- :func:`mark_used` touches ``data_dir(platform)/last-used/<key>`` (it holds the workspace's path).
  The marker lives outside the workspace and the HOME, the only places a sandboxed agent may write,
  so an agent cannot keep its workspace alive (or let another one die) by touching files.
- :func:`in_use` is held while an agent runs: it registers the workspace in this process and holds
  a shared ``flock`` on ``data_dir(platform)/locks/<key>``, so another plugin process sharing the
  data directory sees it too. Where locks cannot be taken (a read-only or odd file system) it
  degrades to this process only and says so once in the log.
- :func:`sweep` removes workspaces under the default location (never a workspace the owner
  configured: only ``<digest>`` folders under ``data_dir(platform)/workspaces`` are looked at) whose
  last use is older than ``days``, with their HOMEs, and HOMEs left without a workspace. It takes the
  exclusive lock of each one before removing it, so a run cannot start in a workspace while it goes
  (the run waits, then :func:`in_use` recreates the folder). It never follows a symbolic link.
- :func:`maybe_sweep` runs :func:`sweep` at most once an hour per data directory, in a worker thread.
- :func:`disk_use` says how much all of it takes, for diagnostics and the README.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import math
import os
import re
import shutil
import stat
import sys
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import RunnerError
from .logs import get_logger
from .process import _digest, _safe, data_root

log = get_logger("runner_kit.housekeeping")

WORKSPACES = "workspaces"
HOMES = "homes"
MARKERS = "last-used"
LOCKS = "locks"
SWEEP_EVERY = 3600.0  # seconds between two sweeps of one data directory by one process
DAY = 86400.0
_NAME = re.compile(r"[0-9a-f]{20}")  # what process._digest names; anything else is not ours to remove
_MARKER_MAX = 4096  # bytes of a marker worth reading (a path)
_WAIT_LOG = 5.0  # seconds a run waits for a sweep elsewhere before the log says so

# this process's view: workspaces agents run in (a count each) and those a sweep is removing.
# Keyed by (data directory, key): nothing of a bot or a person is kept here.
_state = threading.Lock()
_using: dict[tuple[str, str], int] = {}
_removing: set[tuple[str, str]] = set()
_last_sweep: dict[str, float] = {}
_tasks: set[asyncio.Task[Swept | None]] = set()
_said: set[str] = set()


@dataclass
class Swept:
    """What one :func:`sweep` did."""

    workspaces: int = 0  # workspaces removed
    homes: int = 0  # HOMEs removed (with their workspace, or left without one)
    bytes: int = 0  # disk space freed (allocated blocks, each hard-linked file once)
    kept: int = 0  # workspaces used within the period
    busy: int = 0  # idle by their marker but in use (here or in another process): left alone
    errors: int = 0  # entries that could not be removed (logged; the others went on)


# --- marking use -------------------------------------------------------------------------------


def mark_used(platform: str, workspace: Path) -> None:
    """Record that a run uses ``workspace`` now: touch its marker outside the workspace (one
    ``utime`` when it exists). Never raises: a marker that cannot be written is logged once, and the
    workspace then counts as used when its files last changed."""
    try:
        marker = _root(platform) / MARKERS / _key(workspace)
        try:
            os.utime(marker, follow_symlinks=False)
        except FileNotFoundError:
            marker.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(_resolved(workspace))
    except OSError as exc:
        _say_once("mark", "cannot record workspace use under %s (%s); idle workspaces are judged by their "
                          "files instead", _root(platform), exc.strerror or exc)


@contextlib.asynccontextmanager
async def in_use(platform: str, workspace: Path) -> AsyncIterator[None]:
    """Hold ``workspace`` in use while an agent runs in it (an *async* context manager).

    On entry: waits while a sweep (this process's or another's) is removing it, registers it in this
    process, takes a shared lock other processes see, recreates the folder if a sweep removed it
    after the caller created it, and marks it used; on exit marks it used again and lets go. Several
    holders at once are fine (a group sharing a workspace). Never raises for the file system: when
    no lock can be taken it holds the workspace in this process only and logs that once."""
    root = _root(platform)
    ident = (str(root), _key(workspace))
    await _register(ident)
    fd: int | None = None
    try:
        fd = await _hold_shared(root, ident[1])
        _recreate(workspace)
        mark_used(platform, workspace)
        yield
    finally:
        mark_used(platform, workspace)
        if fd is not None:
            os.close(fd)
        with _state:
            if _using.get(ident, 0) <= 1:
                _using.pop(ident, None)
            else:
                _using[ident] -= 1


def _recreate(workspace: Path) -> None:
    """The workspace folder again, when a sweep removed it between its creation and :func:`in_use`."""
    try:
        workspace.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # the agent's start reports it (workspace_dir's message)
        log.warning("could not recreate workspace %s (%s)", workspace, exc.strerror or exc)


async def _register(ident: tuple[str, str]) -> None:
    while True:
        with _state:
            if ident not in _removing:
                _using[ident] = _using.get(ident, 0) + 1
                return
        await asyncio.sleep(0.02)


async def _hold_shared(root: Path, key: str) -> int | None:
    """A shared lock on the workspace's lock file, waiting while a sweep holds it exclusively; None
    when locks cannot be used here."""
    delay, waited, said = 0.005, 0.0, False
    while True:
        try:
            fd = _try_lock(root / LOCKS / key, fcntl.LOCK_SH)
        except OSError as exc:
            _say_once("lock", "cannot lock workspaces under %s (%s): another process's sweep will not see "
                              "this process's runs, only their use markers", root, exc.strerror or exc)
            return None
        if fd is not None:
            return fd
        if waited >= _WAIT_LOG and not said:
            said = True
            log.info("waiting for another process to finish removing an idle workspace (%s)", key)
        await asyncio.sleep(delay)
        waited += delay
        delay = min(delay * 2, 0.2)


def _try_lock(path: Path, op: int) -> int | None:
    """An fd holding ``op`` on ``path`` (created when missing), None while another holder conflicts.

    A sweep unlinks a lock file it removed a workspace under: a file opened before that is not the
    one at ``path`` any more, and a lock on it would exclude nobody, so it is opened again."""
    for _ in range(10):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:
            path.parent.mkdir(parents=True, exist_ok=True)
            continue
        try:
            try:
                fcntl.flock(fd, op | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return None
            now_there = os.stat(path, follow_symlinks=False)
            mine = os.fstat(fd)
        except FileNotFoundError:
            os.close(fd)
            continue
        except BaseException:
            os.close(fd)
            raise
        if (now_there.st_dev, now_there.st_ino) == (mine.st_dev, mine.st_ino):
            return fd
        os.close(fd)
    raise OSError(errno.EAGAIN, f"{path} keeps being replaced")


# --- sweeping ----------------------------------------------------------------------------------


def sweep(platform: str, days: float, *, now: float | None = None) -> Swept:
    """Remove what has been idle longer than ``days`` days (``days <= 0``: nothing, ever).

    Workspaces: ``<digest>`` folders under ``data_dir(platform)/workspaces`` only, each with its
    HOME. A workspace's last use is its marker's time, else (never marked) the newest change of the
    folder or an entry in it, as ``min(mtime, ctime)`` so that a date set into the future does not
    count. One in use in any process is left alone. A workspace that is a symbolic link is only
    unlinked; links inside one are removed, never followed. HOMEs whose workspace is gone (or
    unknown) go when idle as long; the HOME of a workspace the owner configured stays while that
    folder exists. Errors on one entry are logged and counted, the others go on. Runs in the
    caller's thread: from the event loop use :func:`maybe_sweep`."""
    period = _days(days)
    done = Swept()
    if period <= 0:
        return done
    cutoff = (time.time() if now is None else now) - period * DAY
    root = _root(platform)
    kept_keys = _sweep_workspaces(root, cutoff, done)
    _sweep_homes(root, cutoff, kept_keys, done)
    _sweep_leftovers(root, cutoff, kept_keys, done)
    log.info("housekeeping %s: removed %d idle workspaces and %d homes, freed %s; kept %d, %d in use, %d failed",
             root, done.workspaces, done.homes, _size_text(done.bytes), done.kept, done.busy, done.errors)
    return done


def _sweep_workspaces(root: Path, cutoff: float, done: Swept) -> set[str]:
    """Remove idle default workspaces (and their HOMEs); the keys of those that stay."""
    kept: set[str] = set()
    for path in _ours(root / WORKSPACES):
        try:
            key = _key(path)
            kept.add(key)
            if _last_use(root, key, path) >= cutoff:
                done.kept += 1
                continue
            with _claim(root, key) as claimed:
                if not claimed:
                    done.busy += 1
                    continue
                if _last_use(root, key, path) >= cutoff:  # a run came and went meanwhile
                    done.kept += 1
                    continue
                link = path.is_symlink()
                done.bytes += _remove(path)
                done.workspaces += 1
                if link:  # its HOME is the target's, and the target stays: so does that
                    continue
                kept.discard(key)
                home = root / HOMES / key
                if os.path.lexists(home):
                    done.bytes += _remove(home)
                    done.homes += 1
                _forget(root, key)
        except FileNotFoundError:  # another process's sweep removed it meanwhile
            continue
        except Exception as exc:  # noqa: BLE001 - one entry never stops the others
            done.errors += 1
            log.warning("housekeeping: could not remove workspace %s (%s)", path, _why(exc))
    return kept


def _sweep_homes(root: Path, cutoff: float, kept: set[str], done: Swept) -> None:
    """Remove idle HOMEs whose workspace is gone (or was never known)."""
    for home in _ours(root / HOMES):
        key = home.name
        try:
            if key in kept or _named_workspace_exists(root, key) or _last_use(root, key, home) >= cutoff:
                continue
            with _claim(root, key) as claimed:
                if not claimed:
                    done.busy += 1
                    continue
                if _named_workspace_exists(root, key) or _last_use(root, key, home) >= cutoff:
                    continue
                done.bytes += _remove(home)
                done.homes += 1
                _forget(root, key)
        except FileNotFoundError:
            continue
        except Exception as exc:  # noqa: BLE001
            done.errors += 1
            log.warning("housekeeping: could not remove home %s (%s)", home, _why(exc))


def _sweep_leftovers(root: Path, cutoff: float, kept: set[str], done: Swept) -> None:
    """Markers and lock files of workspaces and HOMEs gone some other way (the owner deleted them)."""
    keys = {p.name for p in _ours(root / MARKERS)} | {p.name for p in _ours(root / LOCKS)}
    for key in sorted(keys - kept):
        try:
            if os.path.lexists(root / HOMES / key) or _named_workspace_exists(root, key):
                continue
            marked = _marker_time(root, key)
            if marked is not None and marked >= cutoff:
                continue
            with _claim(root, key) as claimed:
                if claimed:
                    _forget(root, key)
        except Exception as exc:  # noqa: BLE001
            done.errors += 1
            log.warning("housekeeping: could not remove the marker of %s (%s)", key, _why(exc))


@contextlib.contextmanager
def _claim(root: Path, key: str) -> Iterator[bool]:
    """True while this sweep alone holds ``key``: no agent runs in it here or (through its lock) in
    another process, and none can start until the claim ends. False: in use, leave it."""
    ident = (str(root), key)
    with _state:
        free = not _using.get(ident) and ident not in _removing
        if free:
            _removing.add(ident)
    if not free:
        yield False
        return
    try:
        fd = _lock_exclusive(root, key)
        if fd is None:
            yield False
            return
        try:
            yield True
        finally:
            if fd >= 0:
                os.close(fd)
    finally:
        with _state:
            _removing.discard(ident)


def _lock_exclusive(root: Path, key: str) -> int | None:
    """The exclusive lock of ``key``: an fd, None while held elsewhere, -1 where locks cannot be
    used (then runs in other processes are seen by their use markers only)."""
    try:
        return _try_lock(root / LOCKS / key, fcntl.LOCK_EX)
    except OSError as exc:
        _say_once("claim", "cannot lock workspaces under %s (%s): removing idle ones by their use "
                           "markers only", root, exc.strerror or exc)
        return -1


def _forget(root: Path, key: str) -> None:
    """Remove ``key``'s marker and lock file (called holding the lock: see :func:`_try_lock`)."""
    for path in (root / MARKERS / key, root / LOCKS / key):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _last_use(root: Path, key: str, path: Path) -> float:
    marked = _marker_time(root, key)
    return marked if marked is not None else _changed(path)


def _marker_time(root: Path, key: str) -> float | None:
    try:
        return os.lstat(root / MARKERS / key).st_mtime
    except FileNotFoundError:
        return None


def _changed(path: Path) -> float:
    """When ``path`` or an entry directly in it last changed, as far as its owner cannot fake it:
    ``min(mtime, ctime)`` (``touch -d 2099`` sets mtime, but ctime says when that was done)."""
    st = os.lstat(path)
    newest = min(st.st_mtime, st.st_ctime)
    if stat.S_ISDIR(st.st_mode):
        with contextlib.suppress(OSError), os.scandir(path) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    est = entry.stat(follow_symlinks=False)
                    newest = max(newest, min(est.st_mtime, est.st_ctime))
    return newest


def _named_workspace_exists(root: Path, key: str) -> bool:
    """Whether the marker of ``key`` names a folder that still exists (a configured workspace)."""
    try:
        with open(root / MARKERS / key, "rb") as fh:
            named = fh.read(_MARKER_MAX).decode("utf-8", "replace").strip()
    except OSError:
        return False
    return os.path.isabs(named) and "\0" not in named and os.path.isdir(named)


# --- removing safely ---------------------------------------------------------------------------


def _remove(path: Path) -> int:
    """Remove ``path`` without following any symbolic link; the bytes it took on disk.

    A link (or any non-folder) is unlinked itself. A folder goes with ``shutil.rmtree``, which
    unlinks the links inside it (fd-based: no link is followed, even one swapped in meanwhile);
    folders an agent left read-only or unreadable (Go's module cache is) are made writable first."""
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
        return st.st_blocks * 512
    size = _tree_size(path)
    tried: set[str] = set()

    def retry(func: Callable[..., Any], where: str, err: Any) -> None:
        exc = err[1] if isinstance(err, tuple) else err
        if isinstance(exc, FileNotFoundError):
            return
        if not isinstance(exc, PermissionError) or where in tried:
            raise exc
        tried.add(where)
        _owner_rwx(os.path.dirname(where))
        if func in (os.open, os.scandir, os.lstat, os.listdir):  # a folder it could not enter
            _owner_rwx(where)
            _rmtree(where, retry)
        else:
            func(where)

    _rmtree(str(path), retry)
    return size


def _rmtree(path: str, handler: Callable[[Callable[..., Any], str, Any], None]) -> None:
    if sys.version_info >= (3, 12):  # onerror is deprecated there
        shutil.rmtree(path, onexc=handler)
    else:
        shutil.rmtree(path, onerror=handler)


def _owner_rwx(path: str) -> None:
    """Make a folder the sweep must empty writable for its owner: opened without following a link
    (a process still in the workspace could swap the folder for a link between a check and a
    chmod by name, and so have the link's target made writable), changed through that handle."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.fchmod(fd, stat.S_IMODE(os.fstat(fd).st_mode) | stat.S_IRWXU)
    finally:
        os.close(fd)


def _tree_size(path: Path) -> int:
    """Bytes allocated to ``path`` and everything under it, no link followed, each inode once."""
    total, seen = 0, set()
    todo = [str(path)]
    with contextlib.suppress(OSError):
        total += os.lstat(path).st_blocks * 512
    while todo:
        with contextlib.suppress(OSError), os.scandir(todo.pop()) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                        if (st.st_dev, st.st_ino) in seen:
                            continue
                        seen.add((st.st_dev, st.st_ino))
                    total += st.st_blocks * 512
                    if stat.S_ISDIR(st.st_mode):
                        todo.append(entry.path)
    return total


# --- in the background -------------------------------------------------------------------------


def maybe_sweep(platform: str, days: float, *,
                clock: Callable[[], float] = time.monotonic) -> asyncio.Task[Swept | None] | None:
    """Start :func:`sweep` in a worker thread when this process has not swept this data directory
    within the hour; the task (it never raises: a failed sweep is logged and yields None), or None
    when not due, ``days <= 0``, or no event loop runs. Call it after a run: it returns at once."""
    try:
        if _days(days) <= 0:
            return None
        loop = asyncio.get_running_loop()
        where = str(_root(platform))
        at = clock()
        with _state:
            last = _last_sweep.get(where)
            if last is not None and at - last < SWEEP_EVERY:
                return None
            _last_sweep[where] = at
        task = loop.create_task(_sweep_quietly(platform, days))
        _tasks.add(task)  # the loop keeps only a weak reference
        task.add_done_callback(_tasks.discard)
        return task
    except Exception as exc:  # noqa: BLE001 - housekeeping never fails a run
        log.warning("housekeeping could not start (%s)", _why(exc))
        return None


async def _sweep_quietly(platform: str, days: float) -> Swept | None:
    try:
        return await asyncio.to_thread(sweep, platform, days)
    except Exception as exc:  # noqa: BLE001
        log.warning("housekeeping failed (%s)", _why(exc))
        return None


# --- diagnostics -------------------------------------------------------------------------------


def disk_use(platform: str) -> dict[str, Any]:
    """Where the workspaces and HOMEs live and what they take: ``{"root": str, "workspaces":
    {"count", "bytes"}, "homes": {"count", "bytes"}}`` (allocated bytes; links not followed). Walks
    every tree: seconds for a large data directory. Never raises (a missing folder counts 0)."""
    root = _root(platform)
    out: dict[str, Any] = {"root": str(root)}
    for name in (WORKSPACES, HOMES):
        count = size = 0
        with contextlib.suppress(OSError), os.scandir(root / name) as entries:
            for entry in entries:
                count += 1
                size += _tree_size(Path(entry.path))
        out[name] = {"count": count, "bytes": size}
    return out


# --- small helpers -----------------------------------------------------------------------------


def _root(platform: str) -> Path:
    """``data_dir(platform)`` without creating it (a sweep of nothing creates nothing)."""
    return data_root() / _safe(platform)


def _resolved(workspace: Path) -> str:
    try:
        return str(workspace.resolve())
    except (OSError, RuntimeError):  # a link loop: private_home could not have used it either
        return os.path.abspath(workspace)


def _key(workspace: Path) -> str:
    """The name of the workspace's HOME, marker and lock file (as :func:`process.private_home`)."""
    return _digest(_resolved(workspace))


def _ours(folder: Path) -> list[Path]:
    """The entries of ``folder`` named as this kit names them (nothing else is touched)."""
    try:
        with os.scandir(folder) as entries:
            return [folder / e.name for e in entries if _NAME.fullmatch(e.name)]
    except OSError:
        return []


def _days(value: Any) -> float:
    """``days`` as a number: a number or numeric text; NaN, infinity and ``<= 0`` mean never."""
    if isinstance(value, bool):
        raise RunnerError("config.invalid", f"the idle days for housekeeping must be a number, not {value!r}")
    try:
        days = float(value)
    except (TypeError, ValueError):
        raise RunnerError("config.invalid",
                          f"the idle days for housekeeping must be a number, not {value!r}") from None
    return days if math.isfinite(days) and days > 0 else 0.0


def _size_text(n: int) -> str:
    return f"{n / 1048576:.1f} MiB" if n >= 1048576 else f"{n // 1024} KiB"


def _why(exc: BaseException) -> str:
    return str(getattr(exc, "strerror", None) or exc) or type(exc).__name__


def _say_once(what: str, message: str, *args: object) -> None:
    with _state:
        if what in _said:
            return
        _said.add(what)
    log.warning(message, *args)


# --- for an adapter ---------------------------------------------------------------------------------

_HELD: weakref.WeakKeyDictionary[contextlib.AsyncExitStack, set[Path]] = weakref.WeakKeyDictionary()


async def hold(stack: contextlib.AsyncExitStack, platform: str, workspace: Path, days: Any) -> None:
    """For a coding agent's start: keep ``workspace`` in use (:func:`in_use`) until ``stack``
    closes — once per stack and workspace, however often the agent is started again — and sweep the
    platform's idle workspaces now and then (:func:`maybe_sweep` with ``days``, the binding's
    ``cleanup-after-days``). Never raises for housekeeping's own reasons."""
    held = _HELD.setdefault(stack, set())
    if workspace in held:
        return
    await stack.enter_async_context(in_use(platform, workspace))
    held.add(workspace)
    maybe_sweep(platform, days if days is not None else DEFAULT_DAYS)


DEFAULT_DAYS = 30.0
