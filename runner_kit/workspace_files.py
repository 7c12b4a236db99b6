"""Files from a coding agent's workspace back to the chat: the files its answer names, and ``/diff``.

Both read the workspace from the plugin's own process, on the host, outside any sandbox the agent
runs in — while everything in the workspace was written by the agent, i.e. by whoever chats with it.
So nothing here may follow the agent out of its workspace:

- :func:`named_files` attaches only regular files whose real path (symlinks resolved) lies inside
  the workspace and not in ``.git``; a path outside is refused before the file system is asked
  anything about it, and the file is opened without following a final link and without blocking (a
  FIFO or device), then checked again by what the open descriptor really is.
- :func:`diff` never lets git read the repository's own configuration: a ``.git/config`` may name
  programs git runs (``core.fsmonitor``, ``filter.<x>.clean`` for files ``.gitattributes`` marks,
  diff drivers, and ``include``/``includeIf`` files that set any of these), and ``-c`` on the
  command line cannot switch off a filter whose name it does not know. Git runs on a private
  GIT_DIR made for the call — the repository's HEAD, index and ignore list copied, its refs and
  objects linked, a minimal config of our own — with no system or global config, no hooks, no
  external diff or textconv, a timeout and a cap on what is read. A ``.git`` that is a file or a
  link, objects borrowed from elsewhere (alternates), or any link inside the parts git reads, and the
  workspace is listed as a plain folder instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import mimetypes
import os
import re
import shutil
import signal
import stat
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from . import events as ev
from . import outfiles
from .errors import RunnerError
from .inputs import read_at_most
from .logs import get_logger
from .process import child_env
from .texts import t

log = get_logger("runner_kit.workspace_files")

# --- files an answer names -------------------------------------------------------------------------

MAX_CANDIDATES = 100  # distinct paths looked at in one answer (a hostile answer may name thousands)
_SCAN_CHARS = 200_000  # of an answer's text searched for names (the patterns are linear)
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOFOLLOW", 0)
               | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
_READ_CHUNK = 1 << 20

# ![alt](target) and [text](target), the target optionally in <...> (may hold spaces) and with a "title"
_MD_LINK = re.compile(r"!?\[[^\]\n]{0,500}\]\(\s{0,10}(?:<([^<>\n]{1,1024})>|([^\s()<>]{1,1024}))"
                      r"(?:\s{1,10}\"[^\"\n]{0,200}\")?\s{0,10}\)")
_FILE_URL = re.compile(r"file://[^\s()<>\[\]`'\"]{1,1024}")
_BACKTICKED = re.compile(r"`([^`\n]{1,1024})`")
_EXT = re.compile(r"[^/\\]\.[A-Za-z0-9]{1,10}$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]{0,19}:")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]")


def named_files(text: str, workspace: Path, *, max_bytes: int, max_files: int = outfiles.MAX_FILES,
                room: int | None = None, backticks: bool = True) -> tuple[list[ev.Attachment], list[str]]:
    """The files ``text`` (an agent's answer) names that exist in ``workspace``, as inline
    attachments — images first, otherwise in the order named, each file once — and the
    not-attached phrases (:func:`runner_kit.outfiles.left_out_note`) for those past ``max_files``,
    over ``max_bytes`` or over what is left of ``room`` (all the files' bytes; by default
    :data:`runner_kit.outfiles.BUDGET`). Named: markdown image and link targets, ``file://`` links,
    and (with ``backticks``) backticked paths that look like files. A name that leads outside the workspace (``..``, an
    absolute path, a symlink), into ``.git``, or to anything but a readable regular file is passed
    over without a word: the chat learns nothing of what lies outside.

    Blocking (it reads the files): from async code call it through ``asyncio.to_thread``."""
    root = os.path.realpath(workspace)
    left = outfiles.BUDGET if room is None else max(0, room)
    found: list[tuple[str, str]] = []  # (real path, name shown), in the order named
    seen: set[str] = set()
    for candidate in _candidates(text, backticks):
        real = _resolve(candidate, str(workspace), root)
        if real is None or real in seen:
            continue
        seen.add(real)
        found.append((real, os.path.relpath(real, root)))
        if len(found) >= MAX_CANDIDATES:
            break
    attachments: list[ev.Attachment] = []
    phrases: list[str] = []
    for real, rel in outfiles.images_first(found, lambda f: f[1]):
        name = _shown(rel)
        if len(attachments) >= max_files:
            if _regular(real):
                phrases.append(outfiles.too_many(name, max_files))
            continue
        try:
            data = _read_inside(real, root, min(max_bytes, left))
        except _TooLarge as exc:
            err = RunnerError("input.too_large", f"{name} is {exc.size} bytes")
            # the phrase names the limit the file is over: the file size limit, else the message's room
            phrase = outfiles.too_large(name, err, max_bytes, max_bytes if exc.size > max_bytes else left)
            if phrase is not None:
                phrases.append(phrase)
            continue
        except _Skip as exc:
            log.info("named file not attached: %s (%s)", name, exc)
            continue
        left -= len(data)
        mime = mimetypes.guess_type(rel)[0] or "application/octet-stream"
        attachments.append(outfiles.attachment(data, mime, _shown(os.path.basename(rel))))
    return attachments, phrases


def _candidates(text: str, backticks: bool = True) -> Iterator[str]:
    """Every path-like string ``text`` names, in the order it names them (duplicates included)."""
    body = str(text or "")[:_SCAN_CHARS]
    hits: list[tuple[int, str]] = []
    for m in _MD_LINK.finditer(body):
        target = m.group(1) or m.group(2) or ""
        if target.lower().startswith("file:"):
            hits.append((m.start(), target))
        elif not _SCHEME.match(target) and not target.startswith("#"):
            hits.append((m.start(), target.split("#", 1)[0]))
    for m in _FILE_URL.finditer(body):
        hits.append((m.start(), m.group(0).rstrip(".,;:!?")))  # the sentence's end is not the name's
    for m in _BACKTICKED.finditer(body) if backticks else ():
        word = m.group(1).strip()
        if _looks_like_file(word):
            hits.append((m.start(), word))
    hits.sort(key=lambda h: h[0])
    for _, target in hits:
        for path in _decoded(target):
            if path:
                yield path


def _looks_like_file(word: str) -> bool:
    """A backticked word that is a path (``out/report.pdf``, ``./shot.png``, ``/abs/x``, ``a.txt``),
    not code or a command (``npm install``, ``foo()``) or a link."""
    if word.lower().startswith("file://"):
        return True
    if _SCHEME.match(word) and not re.match(r"^[A-Za-z]:[\\/]", word):
        return False
    if any(c in word for c in "*?$|;&<>(){}\"'") or " " in word.strip():
        return False
    return "/" in word or bool(_EXT.search(word))


def _decoded(target: str) -> list[str]:
    """The file path(s) a link target may mean: a ``file://`` URL's path (percent-decoded; only for
    this host), else the target as written and, when it has %-escapes, decoded."""
    if target.lower().startswith("file:"):
        parts = urlsplit(target)
        if parts.netloc not in ("", "localhost"):
            return []
        return [unquote(parts.path)]
    decoded = unquote(target)
    return [target] if decoded == target else [target, decoded]


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _in_git(real: str, root: str) -> bool:
    return ".git" in Path(os.path.relpath(real, root)).parts


def _resolve(candidate: str, workspace: str, root: str) -> str | None:
    """The real path ``candidate`` names inside the workspace, or None. A path outside even as
    written (``..``, an absolute path elsewhere, ``~``) is refused before the file system is asked
    anything about it; then the real path (every link resolved) must still be inside, and not
    the workspace itself or anything in ``.git``."""
    if "\0" in candidate or candidate.startswith("~"):
        return None
    joined = os.path.normpath(os.path.join(workspace, candidate))
    if not (_inside(joined, os.path.normpath(workspace)) or _inside(joined, root)):
        return None
    try:
        real = os.path.realpath(joined)
    except (OSError, ValueError):
        return None
    if real == root or not _inside(real, root) or _in_git(real, root):
        return None
    return real


def _regular(real: str) -> bool:
    try:
        return stat.S_ISREG(os.lstat(real).st_mode)
    except OSError:
        return False


class _Skip(Exception):
    """A named file that is not attached and not mentioned (missing, not a file, unreadable, moved)."""


class _TooLarge(Exception):
    def __init__(self, size: int):
        super().__init__(size)
        self.size = size


def _read_inside(real: str, root: str, limit: int) -> bytes:
    """The bytes of regular file ``real``, at most ``limit`` of them (else :class:`_TooLarge`).
    Checked by type before it is opened (a FIFO is never opened), opened without following a link
    and without blocking, and checked again through the open descriptor: the same file, still a
    regular one, still inside ``root`` (the agent may swap a folder for a link meanwhile)."""
    try:
        st = os.lstat(real)
    except OSError as exc:
        raise _Skip(exc.strerror or "cannot stat") from None
    if not stat.S_ISREG(st.st_mode):
        raise _Skip("not a regular file")
    if st.st_size > limit:
        raise _TooLarge(st.st_size)
    try:
        fd = os.open(real, _OPEN_FLAGS)
    except OSError as exc:
        raise _Skip(exc.strerror or "cannot open") from None
    try:
        fst = os.fstat(fd)
        if not stat.S_ISREG(fst.st_mode) or (fst.st_dev, fst.st_ino) != (st.st_dev, st.st_ino):
            raise _Skip("changed while being read")
        opened = _fd_path(fd)
        if opened is not None and (not _inside(opened, root) or _in_git(opened, root)):
            raise _Skip("moved out of the workspace while being read")
        data = read_at_most(fd, limit + 1)
        total = len(data)
    except OSError as exc:
        raise _Skip(exc.strerror or "cannot read") from None
    finally:
        os.close(fd)
    if total > limit:
        raise _TooLarge(max(total, fst.st_size))
    return data


def _fd_path(fd: int) -> str | None:
    """Where an open descriptor really is (Linux ``/proc``); None where that cannot be told."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def _shown(name: str) -> str:
    """A file name as the chat shows it: no control characters or line breaks (an agent may name a
    file so as to forge a line of the note)."""
    return _CONTROL.sub("?", name)[:300]


# --- /diff -----------------------------------------------------------------------------------------

GIT_TIMEOUT = 10.0  # seconds for all of one /diff's git calls
MAX_SUMMARY_LINES = 30
MAX_UNTRACKED = 2000  # untracked files shown as additions (the rest are counted)
MAX_LISTED = 100_000  # directory entries walked when the workspace is not a repository
_INFO_CAP = 4 << 20  # bytes read of git's file lists and counts
_INDEX_NAMES_CAP = 64 << 20  # bytes of the index's names checked (more: the index is not trusted)
_COPY_CAP = 512 << 20  # an index larger than this is not copied
_EMPTY_TREE = {"sha1": "4b825dc642cb6eb9a060e54bf8d69288fbee4904",
               "sha256": "6ef19b41225c5369f1c104d45d8d85efa9b057b53b14b4b9b939dd74decc5321"}
# settings git takes from its command line over any file; belt and braces, as no repository
# config is read at all (see the module doc)
_HARDENED = (
    "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "core.untrackedCache=false",
    "-c", "diff.external=", "-c", "core.pager=cat", "-c", "safe.directory=*", "-c", "core.quotePath=false",
    "-c", "core.attributesFile=/dev/null", "-c", "core.excludesFile=", "-c", "core.splitIndex=false",
    "-c", "diff.renames=true", "-c", "diff.noprefix=false", "-c", "diff.mnemonicPrefix=false",
    "-c", "protocol.allow=never", "-c", "submodule.recurse=false", "--no-pager", "--literal-pathspecs",
)
_DIFF_FLAGS = ("--no-ext-diff", "--no-textconv", "--no-color", "--ignore-submodules=all", "-M")
_HEAD = re.compile(rb"(ref: refs/[!-~]{1,1000}|[0-9a-f]{40}|[0-9a-f]{64})\n?")


@dataclass(slots=True)
class Diff:
    """What ``/diff`` shows: a short block for the chat, and the patch as a file when there is one."""

    summary: str
    patch: bytes | None = None
    name: str = "changes.patch"


async def diff(workspace: Path, *, since: float | None = None, max_patch_bytes: int = 1_000_000,
               timeout: float = GIT_TIMEOUT) -> Diff:
    """What the agent changed in ``workspace``. A git work tree (``workspace/.git`` a folder in it):
    the uncommitted changes against HEAD (against nothing before the first commit), untracked files
    that are not ignored as additions, renames found; ``summary`` lists the files with their +/-
    counts (at most :data:`MAX_SUMMARY_LINES`), ``patch`` is the unified diff, cut at
    ``max_patch_bytes`` with a note. Otherwise: the files modified after ``since`` (a time stamp)
    with their sizes, no patch — and without ``since``, a line saying that cannot be told.
    Never raises for what is in the workspace; all of git's work ends within ``timeout`` seconds."""
    root, kind = await asyncio.to_thread(_where, workspace)
    if kind == "missing":
        return Diff(t("The workspace does not exist yet: no changes.", "工作区还不存在：没有改动。"))
    note = ""
    if kind == "git":
        git = shutil.which("git")
        if git is None:
            note = t("git is not installed here, so the changes are listed by time.",
                     "这里没有安装 git，因此按修改时间列出改动。")
        else:
            try:
                return await _git_diff(git, root, max_patch_bytes, timeout)
            except _NotTrusted as exc:
                log.warning("/diff: %s: %s; listing files by time instead", root, exc)
                note = t("The repository in the workspace cannot be read safely ({why}), so the changes are "
                         "listed by time.", "工作区里的仓库无法安全读取（{why}），因此按修改时间列出改动。",
                         why=str(exc))
            except _GitFailed as exc:
                log.warning("/diff: git failed in %s: %s", root, exc.detail)
                return Diff(exc.said)
    elif kind == "odd-git":
        note = t("The workspace's .git is not a plain folder in it, so the changes are listed by time.",
                 "工作区的 .git 不是其中的普通文件夹，因此按修改时间列出改动。")
    listing = await asyncio.to_thread(_changed_since, root, since, timeout)
    return Diff(f"{note}\n{listing}" if note else listing)


def _where(workspace: Path) -> tuple[Path, str]:
    """The workspace's real path and what it is: ``missing``, ``git`` (``.git`` a folder in it),
    ``odd-git`` (a ``.git`` that is a file or a link: a worktree or submodule pointer may name a
    repository anywhere on the host) or ``plain``."""
    root = Path(os.path.realpath(workspace))
    if not root.is_dir():
        return root, "missing"
    gitdir = root / ".git"
    if gitdir.is_symlink() or (os.path.lexists(gitdir) and not gitdir.is_dir()):
        return root, "odd-git"
    return root, "git" if gitdir.is_dir() else "plain"


class _NotTrusted(Exception):
    """The repository's files lead outside the workspace (or cannot be checked): git is not run."""


class _GitFailed(Exception):
    def __init__(self, said: str, detail: str):
        super().__init__(detail)
        self.said, self.detail = said, detail


async def _git_diff(git: str, root: Path, max_patch_bytes: int, timeout: float) -> Diff:
    timeout = max(0.1, timeout)
    with tempfile.TemporaryDirectory(prefix="runner-kit-diff-") as tmp:
        private = Path(tmp) / "git"
        home = Path(tmp) / "home"
        home.mkdir()
        try:
            fmt = await asyncio.to_thread(_private_gitdir, root / ".git", private)
        except OSError as exc:
            raise _NotTrusted(t("its files cannot be read", "其文件无法读取")) from exc
        env = child_env({
            "GIT_DIR": str(private), "GIT_WORK_TREE": str(root), "GIT_INDEX_FILE": str(private / "index"),
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_ATTR_NOSYSTEM": "1",
            "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0", "GIT_PAGER": "cat", "PAGER": "cat",
            "GIT_LITERAL_PATHSPECS": "1", "GIT_NO_REPLACE_OBJECTS": "1", "GIT_ASKPASS": "/bin/false",
            "SSH_ASKPASS": "/bin/false", "XDG_CONFIG_HOME": str(home), "LC_ALL": "C",
        }, home=home)
        run = _Runner(git, root, env, timeout)
        head = await run("rev-parse", "--verify", "--quiet", "HEAD^{commit}", cap=200)
        if head.timed_out:
            _check(head, "rev-parse")
        base = head.out.strip().decode() if head.code == 0 and head.out.strip() else _EMPTY_TREE[fmt]
        tracked = await run("ls-files", "-z", "--cached", cap=_INDEX_NAMES_CAP)
        _check(tracked, "ls-files --cached")
        if tracked.cut or any(map(_leaves_tree, tracked.out.split(b"\0"))):
            raise _NotTrusted(t("its index names files outside the workspace", "其索引指向工作区之外的文件"))
        listed = await run("ls-files", "-z", "--others", "--exclude-standard", cap=_INFO_CAP)
        _check(listed, "ls-files")
        names = listed.out.split(b"\0")
        names = [p for p in (names[:-1] if listed.cut else names) if p]  # a cut list ends mid-name
        untracked, more_untracked = names[:MAX_UNTRACKED], max(0, len(names) - MAX_UNTRACKED)
        if untracked:
            added = await run("add", "--intent-to-add", "--pathspec-from-file=-", "--pathspec-file-nul",
                              cap=_INFO_CAP, stdin=b"\0".join(untracked) + b"\0")
            _check(added, "add -N")
        status = await run("diff", *_DIFF_FLAGS, "--name-status", "-z", base, "--", cap=_INFO_CAP)
        counts = await run("diff", *_DIFF_FLAGS, "--numstat", "-z", base, "--", cap=_INFO_CAP)
        _check(status, "diff --name-status")
        _check(counts, "diff --numstat")
        files = _parse(status.out, counts.out)
        if not files:
            return Diff(t("No changes in the workspace since the last commit.", "自上次提交以来，工作区没有改动。"))
        patch = await run("diff", *_DIFF_FLAGS, "--patch", base, "--", cap=max_patch_bytes)
        _check(patch, "diff")
    cut = status.cut or counts.cut
    summary = _summary(files, more_untracked, cut=patch.cut, max_patch_bytes=max_patch_bytes)
    body = patch.out
    if patch.cut:
        body = body[: body.rfind(b"\n") + 1] if b"\n" in body else b""
        body += t("\n# ... the patch is cut here at {size}; more changes follow in the workspace.\n",
                  "\n# …… 补丁在 {size} 处截断；工作区里还有更多改动。\n",
                  size=outfiles.size_text(max_patch_bytes)).encode()
    if cut:
        log.info("/diff: git's file list was cut at %d bytes", _INFO_CAP)
    return Diff(summary, body or None)


def _leaves_tree(name: bytes) -> bool:
    """Whether an index entry's name leads out of the work tree. Git never writes one, but it reads
    an index as it finds it and then compares (and prints) the work-tree file at that name: a
    ``../home/.ssh/id_rsa`` the agent wrote into ``.git/index`` would be read from the host."""
    if not name:
        return False
    return name.startswith(b"/") or any(part in (b"", b".", b"..") for part in name.split(b"/"))


def _check(res: _Result, what: str) -> None:
    if res.timed_out:
        raise _GitFailed(t("git took longer than {s:g} s to read the workspace; try again later or ask the "
                           "agent for a smaller change.", "git 读取工作区超过 {s:g} 秒；请稍后再试，或让 agent "
                           "给出更小的改动。", s=res.timeout), f"git {what} timed out")
    if res.code != 0 and not res.cut:
        raise _GitFailed(t("git could not read the repository in the workspace.", "git 无法读取工作区里的仓库。"),
                         f"git {what} exited {res.code}: {res.err[-500:]!r}")


@dataclass(slots=True)
class _Result:
    code: int | None
    out: bytes
    err: bytes
    cut: bool = False
    timed_out: bool = False
    timeout: float = 0.0


class _Runner:
    """Runs one git command at a time in the workspace with the private GIT_DIR; all of them share
    one deadline. Output past its cap is not read: the process is killed (by its own process group,
    which is only it) and the result marked cut."""

    def __init__(self, git: str, root: Path, env: dict[str, str], timeout: float):
        self.git, self.root, self.env, self.total = git, root, env, timeout
        self.deadline = time.monotonic() + timeout

    async def __call__(self, *args: str, cap: int, stdin: bytes | None = None) -> _Result:
        left = self.deadline - time.monotonic()
        if left <= 0:
            return _Result(None, b"", b"", timed_out=True, timeout=self.total)
        proc = await asyncio.create_subprocess_exec(
            self.git, *_HARDENED, *args, cwd=str(self.root), env=self.env, start_new_session=True,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            return await asyncio.wait_for(self._talk(proc, cap, stdin), left)
        except TimeoutError:
            return _Result(None, b"", b"", timed_out=True, timeout=self.total)
        finally:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(proc.wait(), 2.0)

    async def _talk(self, proc: asyncio.subprocess.Process, cap: int, stdin: bytes | None) -> _Result:
        assert proc.stdout is not None and proc.stderr is not None
        err_task = asyncio.ensure_future(proc.stderr.read(64 * 1024))
        try:
            return await self._read(proc, cap, stdin, err_task)
        finally:
            err_task.cancel()

    async def _read(self, proc: asyncio.subprocess.Process, cap: int, stdin: bytes | None,
                    err_task: asyncio.Future[bytes]) -> _Result:
        assert proc.stdout is not None
        if stdin is not None and proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                proc.stdin.write(stdin)
                await proc.stdin.drain()
            proc.stdin.close()
        chunks: list[bytes] = []
        total = 0
        cut = False
        while chunk := await proc.stdout.read(1 << 16):
            chunks.append(chunk)
            total += len(chunk)
            if total > cap:
                cut = True
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                break
        code = await proc.wait()
        err = await err_task
        return _Result(code, b"".join(chunks)[:cap], err, cut=cut)


def _private_gitdir(real: Path, private: Path) -> str:
    """Make ``private`` a GIT_DIR reading the workspace repository ``real`` without its config,
    hooks or attributes; return its object format (``sha1``/``sha256``). Raises :class:`_NotTrusted`
    when any part git would read is a link, or its objects are borrowed from elsewhere."""
    objects, refs = real / "objects", real / "refs"
    for part in (objects, refs):
        if part.is_symlink() or not part.is_dir():
            raise _NotTrusted(t("{p} is not a plain folder", "{p} 不是普通文件夹", p=f".git/{part.name}"))
    for name in ("alternates", "http-alternates"):
        if os.path.lexists(objects / "info" / name):
            raise _NotTrusted(t("it borrows objects from elsewhere", "它借用了别处的对象"))
    _no_links(objects, refs, real / "packed-refs")
    private.mkdir()
    head = _small(real / "HEAD", 4096)
    if head is None or not _HEAD.fullmatch(head):
        raise _NotTrusted(t(".git/HEAD is not a plain HEAD file", ".git/HEAD 不是普通的 HEAD 文件"))
    (private / "HEAD").write_bytes(head)
    config = _small(real / "config", 1 << 20) or b""
    fmt = "sha256" if re.search(rb"(?im)^\s*objectformat\s*=\s*sha256\s*$", config) else "sha1"
    (private / "config").write_text(
        "[core]\n\trepositoryformatversion = 1\n\tbare = false\n[extensions]\n\tobjectformat = sha256\n"
        if fmt == "sha256" else "[core]\n\trepositoryformatversion = 0\n\tbare = false\n")
    # the repository's objects are read as an alternate of an object store of our own, so that what
    # git writes (``add -N`` stores the empty blob) stays out of the agent's repository
    if "\n" in str(objects):
        raise _NotTrusted(t("its path holds a line break", "其路径含有换行符"))
    (private / "objects" / "info").mkdir(parents=True)
    (private / "objects" / "info" / "alternates").write_text(f"{objects}\n")
    os.symlink(refs, private / "refs")
    if os.path.lexists(real / "packed-refs"):
        os.symlink(real / "packed-refs", private / "packed-refs")
    _copy(real / "index", private / "index", _COPY_CAP)  # git may refresh it: never the agent's own
    _copy(real / "shallow", private / "shallow", 1 << 20)
    (private / "info").mkdir()
    _copy(real / "info" / "exclude", private / "info" / "exclude", 1 << 20)
    return fmt


def _no_links(*parts: Path) -> None:
    """Refuse when anything under ``parts`` is a symlink (git itself never makes one there; an agent
    linking objects or refs to another repository would have ``/diff`` show that repository)."""
    seen = 0
    todo = [p for p in parts if os.path.lexists(p)]
    for p in todo:
        if p.is_symlink():
            raise _NotTrusted(t("it holds a symbolic link", "其中含有符号链接"))
    dirs = [str(p) for p in todo if p.is_dir()]
    while dirs:
        try:
            with os.scandir(dirs.pop()) as entries:
                for entry in entries:
                    seen += 1
                    if seen > 2_000_000:
                        raise _NotTrusted(t("it is too large to check", "它太大，无法检查"))
                    if entry.is_symlink():
                        raise _NotTrusted(t("it holds a symbolic link", "其中含有符号链接"))
                    if entry.is_dir(follow_symlinks=False):
                        dirs.append(entry.path)
        except FileNotFoundError:
            continue  # git's own gc removed it meanwhile


def _small(path: Path, cap: int) -> bytes | None:
    """A regular file's bytes, not through a link, without blocking; None when absent, not a
    regular file or over ``cap``."""
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > cap:
            return None
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(cap + 1)
        return data if len(data) <= cap else None
    finally:
        os.close(fd)


def _copy(src: Path, dst: Path, cap: int) -> None:
    """Copy a regular file (not through a link, at most ``cap`` bytes); nothing when it is absent,
    refused (:class:`_NotTrusted`) when it is anything else."""
    if not os.path.lexists(src):
        return
    try:
        fd = os.open(src, _OPEN_FLAGS)
    except OSError as exc:
        raise _NotTrusted(t("{p} cannot be read", "{p} 无法读取", p=f".git/{src.name}")) from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > cap:
            raise _NotTrusted(t("{p} is not a plain file", "{p} 不是普通文件", p=f".git/{src.name}"))
        with os.fdopen(os.dup(fd), "rb") as fin, open(dst, "wb") as fout:
            shutil.copyfileobj(fin, fout, _READ_CHUNK)
    finally:
        os.close(fd)


@dataclass(slots=True)
class _Change:
    status: str  # A M D R T …
    path: str
    old: str | None = None
    added: int | None = None  # None: binary
    deleted: int | None = None


def _parse(name_status: bytes, numstat: bytes) -> list[_Change]:
    """git's ``--name-status -z`` and ``--numstat -z`` of one diff, joined (same order)."""
    changes: list[_Change] = []
    fields = name_status.split(b"\0")
    i = 0
    while i < len(fields) and fields[i]:
        code = fields[i].decode("ascii", "replace")
        if code[:1] in ("R", "C") and i + 2 < len(fields):
            changes.append(_Change(code[0], _dec(fields[i + 2]), old=_dec(fields[i + 1])))
            i += 3
        elif i + 1 < len(fields):
            changes.append(_Change(code[:1], _dec(fields[i + 1])))
            i += 2
        else:
            break
    nums = numstat.split(b"\0")
    i = n = 0
    while i < len(nums) and nums[i] and n < len(changes):
        head = nums[i].split(b"\t")
        if len(head) < 3:
            break
        i += 3 if head[2] == b"" else 1  # a rename: "a\td\t", then old, then new
        if head[0] != b"-":
            with contextlib.suppress(ValueError):
                changes[n].added, changes[n].deleted = int(head[0]), int(head[1])
        n += 1
    return changes


def _dec(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _summary(files: Sequence[_Change], more_untracked: int, *, cut: bool, max_patch_bytes: int) -> str:
    added = sum(f.added or 0 for f in files)
    deleted = sum(f.deleted or 0 for f in files)
    lines = [t("{n} files changed (+{a} −{d}):", "{n} 个文件有改动（+{a} −{d}）：", n=len(files), a=added, d=deleted)
             if len(files) != 1 else
             t("1 file changed (+{a} −{d}):", "1 个文件有改动（+{a} −{d}）：", a=added, d=deleted)]
    for f in files[:MAX_SUMMARY_LINES]:
        name = _shown(f"{f.old} → {f.path}" if f.old is not None else f.path)
        if f.added is None:
            counts = t("binary", "二进制")
        else:
            counts = " ".join(x for x in (f"+{f.added}" if f.added else "", f"−{f.deleted}" if f.deleted else "")
                              if x) or "±0"
        lines.append(f"{f.status} {name}  {counts}")
    if len(files) > MAX_SUMMARY_LINES:
        lines.append(t("… and {n} more", "……另有 {n} 个", n=len(files) - MAX_SUMMARY_LINES))
    if more_untracked:
        lines.append(t("({n} more new files are not shown.)", "（另有 {n} 个新文件未显示。）", n=more_untracked))
    if cut:
        lines.append(t("(The patch is cut at {size}.)", "（补丁在 {size} 处截断。）",
                       size=outfiles.size_text(max_patch_bytes)))
    return "\n".join(lines)


def _size(n: int) -> str:
    return f"{n} B" if n < 1024 else outfiles.size_text(n)


def _changed_since(root: Path, since: float | None, timeout: float) -> str:
    """The files (regular, not through links, outside ``.git``) modified after ``since``, newest
    first, with sizes; the walk stops after :data:`MAX_LISTED` entries or ``timeout`` seconds."""
    if since is None:
        return t("The workspace is not a git repository, and without a start time the changes cannot be told.",
                 "工作区不是 git 仓库，没有开始时间就无法分辨改动。")
    deadline = time.monotonic() + max(0.1, timeout)
    found: list[tuple[float, str, int]] = []
    seen = 0
    partial = False
    dirs = [str(root)]
    while dirs and not partial:
        try:
            with os.scandir(dirs.pop()) as entries:
                for entry in entries:
                    seen += 1
                    if seen > MAX_LISTED or time.monotonic() > deadline:
                        partial = True
                        break
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            if entry.name != ".git":
                                dirs.append(entry.path)
                        elif entry.is_file(follow_symlinks=False):
                            st = entry.stat(follow_symlinks=False)
                            if st.st_mtime > since:
                                found.append((st.st_mtime, os.path.relpath(entry.path, root), st.st_size))
                    except OSError:
                        continue
        except OSError:
            continue
    if not found:
        text = t("No files changed in the workspace since this session started.",
                 "自本会话开始以来，工作区没有文件改动。")
    else:
        found.sort(key=lambda f: (-f[0], f[1]))
        lines = [t("{n} files changed since this session started (no git repository, so no patch):"
                   if len(found) != 1 else "1 file changed since this session started (no git repository, so no patch):",
                   "自本会话开始以来有 {n} 个文件改动（不是 git 仓库，因此没有补丁）：", n=len(found))]
        lines += [f"{_shown(rel)}  {_size(size)}" for _, rel, size in found[:MAX_SUMMARY_LINES]]
        if len(found) > MAX_SUMMARY_LINES:
            lines.append(t("… and {n} more", "……另有 {n} 个", n=len(found) - MAX_SUMMARY_LINES))
        text = "\n".join(lines)
    if partial:
        text += "\n" + t("(The workspace is too large to look through whole; this list may be incomplete.)",
                         "（工作区太大，未能全部查看；此列表可能不完整。）")
    return text
