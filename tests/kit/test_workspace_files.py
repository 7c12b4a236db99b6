"""Files from the agent's workspace back to the chat (the files an answer names) and ``/diff``.

Everything in a workspace is written by the agent, i.e. by whoever chats with it, while these read it
from the plugin's process on the host: every attack below is planted by writing files straight into
a tmp workspace, as a hostile agent would, and must neither leak a byte from outside nor run anything.
"""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

from runner_kit import outfiles, texts
from runner_kit import workspace_files as wf
from runner_kit.workspace_files import diff, named_files

SECRET = b"TOP-SECRET-outside-the-workspace-0123456789"
PNG = b"\x89PNG\r\n\x1a\n" + b"\0" * 40

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed on this machine")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    d = tmp_path / "ws"
    d.mkdir()
    return d


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the workspace (the agent's HOME, another conversation) holding a secret."""
    d = tmp_path / "home"
    d.mkdir()
    (d / "secret.txt").write_bytes(SECRET)
    (d / "secret.png").write_bytes(PNG + SECRET)
    return d


@pytest.fixture
def zh():
    tokens = texts.bind(texts.ZH)
    yield
    texts.unbind(tokens)


def data_of(att) -> bytes:
    head, _, b64 = att.url.partition(",")
    assert head.startswith("data:") and head.endswith(";base64")
    return base64.b64decode(b64)


def names(atts) -> list[str | None]:
    return [a.name for a in atts]


def attach(text: str, ws: Path, **kw):
    kw.setdefault("max_bytes", 1 << 20)
    return named_files(text, ws, **kw)


# --- named_files: what an answer names ---------------------------------------------------------------


def test_every_way_of_naming_a_file_attaches_it_images_first_in_the_order_named(ws):
    (ws / "out").mkdir()
    (ws / "out" / "report.pdf").write_bytes(b"%PDF-1.4 report")
    (ws / "shot.png").write_bytes(PNG)
    (ws / "notes.txt").write_bytes(b"notes")
    (ws / "my file.csv").write_bytes(b"a,b")
    (ws / "chart.jpg").write_bytes(b"\xff\xd8jpeg")
    text = ("Built `out/report.pdf`. See [the notes](notes.txt) and ![shot](./shot.png), "
            f"data in [csv](<my file.csv>) and file://{ws}/chart.jpg.")
    atts, left = attach(text, ws)
    assert left == []
    assert names(atts) == ["shot.png", "chart.jpg", "report.pdf", "notes.txt", "my file.csv"]
    assert [a.kind for a in atts] == ["image", "image", "file", "file", "file"]
    assert atts[0].mime_type == "image/png" and atts[2].mime_type == "application/pdf"
    assert data_of(atts[2]) == b"%PDF-1.4 report" and data_of(atts[0]) == PNG


def test_a_file_named_many_ways_is_sent_once(ws):
    (ws / "a.png").write_bytes(PNG)
    text = f"`a.png` ![x](./a.png) [y](a.png) `{ws}/a.png` file://{ws}/a.png ![z](a%2Epng)"
    atts, left = attach(text, ws)
    assert names(atts) == ["a.png"] and left == []


def test_urls_words_and_code_are_not_files(ws):
    for name in ("report", "install", "README", "docs"):
        (ws / name).write_bytes(b"x")
    (ws / "report.pdf").write_bytes(b"x")
    text = ("The report is done; run `npm install` and `make docs`, read README, see "
            "[docs](https://example.com/report.pdf), ![remote](http://x/report.pdf), [anchor](#report), "
            "`report` and `https://example.com/a.txt`; report.pdf was mentioned without backticks.")
    assert attach(text, ws) == ([], [])


def test_a_file_that_does_not_exist_or_is_a_folder_is_passed_over(ws):
    (ws / "dir.d").mkdir()
    assert attach("`missing.png` `dir.d` [x](dir.d/) `./`", ws) == ([], [])


@pytest.mark.parametrize("named", [
    "../home/secret.txt", "../../etc/passwd", "/etc/passwd", "/proc/self/environ", "file:///etc/passwd",
    "file:///proc/self/environ", "~/secret.txt", "out/../../home/secret.txt", "file://otherhost/etc/passwd",
    "..%2Fhome%2Fsecret.txt", "/dev/zero",
])
def test_a_path_leading_out_of_the_workspace_attaches_nothing(ws, outside, named):
    (ws / "out").mkdir()
    atts, left = attach(f"`{named}` [x]({named}) ![x]({named}) {named}", ws)
    assert atts == [] and left == []


def test_named_by_its_absolute_path_outside_is_refused_before_the_file_system_is_asked(ws, outside, monkeypatch):
    touched = []
    real = os.path.realpath
    monkeypatch.setattr(os.path, "realpath", lambda p, *a, **k: (touched.append(str(p)), real(p, *a, **k))[1])
    attach(f"`{outside}/secret.txt` [x]({ws}/../home/secret.txt)", ws)
    assert not any("secret" in p for p in touched)


def test_symlinks_in_the_workspace_never_lead_out(ws, outside):
    os.symlink(outside / "secret.txt", ws / "passwd.txt")
    os.symlink("/etc/passwd", ws / "etc.txt")
    os.symlink(outside / "secret.png", ws / "pic.png")
    os.symlink(outside, ws / "home")  # a folder link to the agent's HOME
    os.symlink("/proc/self/environ", ws / "environ.txt")
    os.symlink("/dev/zero", ws / "zero.bin")
    text = ("`passwd.txt` `etc.txt` ![p](pic.png) `home/secret.txt` [e](environ.txt) `zero.bin` "
            f"`{ws}/home/secret.png` file://{ws}/home/secret.txt")
    atts, left = attach(text, ws)
    assert atts == [] and left == []


def test_a_symlink_inside_the_workspace_to_a_file_inside_is_attached_once(ws):
    (ws / "real.txt").write_bytes(b"inside")
    os.symlink("real.txt", ws / "alias.txt")
    atts, _ = attach("`alias.txt` and `real.txt`", ws)
    assert [data_of(a) for a in atts] == [b"inside"]


def test_nothing_from_git_metadata(ws):
    (ws / ".git" / "objects").mkdir(parents=True)
    (ws / ".git" / "config").write_text("[remote \"origin\"]\n\turl = https://user:token@example.com/x\n")
    os.symlink(".git/config", ws / "config.txt")
    atts, left = attach("`.git/config` [c](.git/config) `config.txt` `./.git/HEAD`", ws)
    assert atts == [] and left == []


def test_a_fifo_is_never_opened_and_does_not_hang(ws):
    os.mkfifo(ws / "pipe.txt")
    os.symlink("pipe.txt", ws / "pipe-link.png")
    start = time.monotonic()
    atts, left = attach("`pipe.txt` ![x](pipe-link.png)", ws)
    assert atts == [] and left == []
    assert time.monotonic() - start < 1


def test_a_folder_swapped_for_a_link_after_the_check_is_caught_by_the_open_file(ws, outside, monkeypatch):
    """The agent may replace ``out/`` by a link to its HOME between the check and the read: the file
    actually opened is checked again."""
    os.symlink(outside, ws / "out")
    monkeypatch.setattr(wf, "_resolve", lambda cand, w, root: os.path.join(root, "out", "secret.txt"))
    atts, left = attach("`out/secret.txt`", ws)
    assert atts == [] and left == []


def test_a_control_character_in_a_name_cannot_forge_a_line(ws):
    (ws / "a\nb.txt").write_bytes(b"x" * 100)
    atts, left = attach("[x](a%0Ab.txt)", ws, max_bytes=10)
    assert atts == [] and len(left) == 1 and "\n" not in left[0] and "a?b.txt" in left[0]


def test_files_over_the_size_limit_are_named_not_attached(ws):
    (ws / "big.zip").write_bytes(b"z" * 5000)
    (ws / "small.txt").write_bytes(b"s" * 10)
    atts, left = attach("`big.zip` `small.txt`", ws, max_bytes=4096)
    assert names(atts) == ["small.txt"]
    assert left == ["'big.zip' (larger than 4 KiB, the file size limit)"]
    assert "big.zip" in outfiles.left_out_note(left)


def test_all_files_stay_within_the_room_of_one_message(ws):
    for n in range(3):
        (ws / f"f{n}.bin").write_bytes(bytes([n]) * 600)
    atts, left = attach("`f0.bin` `f1.bin` `f2.bin`", ws, max_bytes=1000, room=1300)
    assert names(atts) == ["f0.bin", "f1.bin"]
    assert sum(len(data_of(a)) for a in atts) <= 1300
    assert left == ["'f2.bin' (larger than one LangBot message can carry)"]


def test_a_file_that_grows_after_its_size_was_checked_is_not_sent_whole(ws, monkeypatch):
    (ws / "log.txt").write_bytes(b"x" * 100)
    real_lstat = os.lstat

    def grow(path, *a, **k):
        st = real_lstat(path, *a, **k)
        if str(path).endswith("log.txt"):
            with open(path, "ab") as fh:
                fh.write(b"y" * 5000)
        return st

    monkeypatch.setattr(os, "lstat", grow)
    atts, left = attach("`log.txt`", ws, max_bytes=1000)
    assert atts == [] and len(left) == 1 and "log.txt" in left[0]


def test_more_files_than_allowed_are_named_with_images_first_kept(ws):
    for n in range(4):
        (ws / f"doc{n}.txt").write_bytes(b"d")
    (ws / "pic.png").write_bytes(PNG)
    atts, left = attach(" ".join(f"`doc{n}.txt`" for n in range(4)) + " ![p](pic.png)", ws, max_files=2)
    assert names(atts) == ["pic.png", "doc0.txt"]
    assert left == [f"'doc{n}.txt' (more than 2 files)" for n in (1, 2, 3)]


def test_the_not_attached_phrases_speak_chinese(ws, zh):
    (ws / "big.zip").write_bytes(b"z" * 5000)
    (ws / "a.txt").write_bytes(b"a")
    (ws / "b.txt").write_bytes(b"b")
    atts, left = attach("`a.txt` `big.zip` `b.txt`", ws, max_bytes=4096, max_files=1)
    assert names(atts) == ["a.txt"]
    assert left == ["“big.zip”（超过 1 个文件）", "“b.txt”（超过 1 个文件）"]
    _, left = attach("`big.zip`", ws, max_bytes=4096)
    assert left == ["“big.zip”（超过文件大小上限 4 KiB）"]


def test_a_hostile_answer_naming_thousands_of_files_is_bounded(ws):
    for n in range(300):
        (ws / f"f{n}.txt").write_bytes(b"x")
    text = " ".join(f"`f{n}.txt`" for n in range(300)) + " `" + "a/" * 100_000 + "`"
    start = time.monotonic()
    atts, left = attach(text, ws)
    assert len(atts) == outfiles.MAX_FILES
    assert len(atts) + len(left) == wf.MAX_CANDIDATES
    assert time.monotonic() - start < 2


# --- /diff in a git work tree ------------------------------------------------------------------------


def git(ws: Path, *args: str) -> str:
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": str(ws.parent), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=ws, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(ws: Path) -> Path:
    git(ws, "init", "-q", "-b", "main")
    (ws / "f.txt").write_text("one\ntwo\n")
    (ws / "old.txt").write_text("gone\n")
    (ws / "mv.txt").write_text("".join(f"line {n}\n" for n in range(40)))
    (ws / ".gitignore").write_text("*.log\n")
    git(ws, "add", ".")
    git(ws, "commit", "-qm", "start")
    return ws


@needs_git
async def test_diff_shows_edits_renames_deletions_binaries_and_untracked_files(repo):
    (repo / "f.txt").write_text("one\ntwo\nthree\n")
    (repo / "old.txt").unlink()
    (repo / "mv.txt").rename(repo / "moved.txt")
    (repo / "new.txt").write_text("fresh\n")
    (repo / "logo.bin").write_bytes(bytes(range(256)) * 4)
    (repo / "debug.log").write_text("ignored\n")
    status_before = git(repo, "status", "--porcelain")
    d = await diff(repo)
    lines = d.summary.splitlines()
    assert lines[0] == "5 files changed (+2 −1):"
    assert set(lines[1:]) == {"M f.txt  +1", "D old.txt  −1", "R mv.txt → moved.txt  ±0", "A new.txt  +1",
                              "A logo.bin  binary"}
    assert d.name == "changes.patch" and d.patch is not None
    patch = d.patch.decode()
    assert "+three\n" in patch and "-gone\n" in patch and "+fresh\n" in patch
    assert "rename from mv.txt\nrename to moved.txt" in patch
    assert "Binary files /dev/null and b/logo.bin differ" in patch
    assert "debug.log" not in patch and "debug.log" not in d.summary
    # the agent's own repository is left as it was: its index, and no object written into it
    assert git(repo, "status", "--porcelain") == status_before
    assert "dangling" not in git(repo, "fsck", "--no-progress")


@needs_git
async def test_the_patch_applies_to_the_last_commit(repo, tmp_path):
    (repo / "f.txt").write_text("one\n2\n")
    (repo / "new.txt").write_text("fresh\n")
    d = await diff(repo)
    clone = tmp_path / "clone"
    await asyncio.to_thread(git, repo, "clone", "-q", str(repo), str(clone))
    (clone / "p.patch").write_bytes(d.patch or b"")
    git(clone, "apply", "p.patch")
    assert (clone / "f.txt").read_text() == "one\n2\n" and (clone / "new.txt").read_text() == "fresh\n"


@needs_git
async def test_no_changes_says_so_and_has_no_patch(repo):
    d = await diff(repo)
    assert d.patch is None
    assert d.summary == "No changes in the workspace since the last commit."


@needs_git
async def test_a_repository_without_commits_shows_every_file_as_new(ws):
    git(ws, "init", "-q")
    (ws / "a.py").write_text("print(1)\nprint(2)\n")
    (ws / "sub").mkdir()
    (ws / "sub" / "b.txt").write_text("b\n")
    d = await diff(ws)
    assert d.summary.splitlines() == ["2 files changed (+3 −0):", "A a.py  +2", "A sub/b.txt  +1"]
    assert b"+print(2)\n" in (d.patch or b"")


@needs_git
async def test_a_huge_patch_is_cut_with_a_note(repo):
    (repo / "big.txt").write_bytes(b"".join(b"%07d some text to make the line longer\n" % n
                                            for n in range(130_000)))  # ~5 MB
    start = time.monotonic()
    d = await diff(repo, max_patch_bytes=200_000)
    assert time.monotonic() - start < 5
    assert d.patch is not None and len(d.patch) < 200_000 + 200
    assert d.patch.endswith(b"# ... the patch is cut here at 195 KiB; more changes follow in the workspace.\n")
    assert b"0000000 some text" in d.patch  # the start is there, cut at a line's end
    assert "A big.txt  +130000" in d.summary and "(The patch is cut at 195 KiB.)" in d.summary


@needs_git
async def test_the_summary_lists_thirty_files_then_counts_the_rest(ws, zh):
    git(ws, "init", "-q")
    for n in range(45):
        (ws / f"f{n:02d}.txt").write_text("x\n")
    d = await diff(ws)
    lines = d.summary.splitlines()
    assert lines[0] == "45 个文件有改动（+45 −0）："
    assert len(lines) == 32 and lines[-1] == "……另有 15 个"


@needs_git
async def test_file_names_cannot_forge_summary_lines(ws):
    git(ws, "init", "-q")
    (ws / "a\nM fake.txt  +999").write_text("x\n")
    d = await diff(ws)
    assert d.summary.splitlines() == ["1 file changed (+1 −0):", "A a?M fake.txt  +999  +1"]


# --- /diff: a hostile repository runs nothing and reads nothing from outside -------------------------


def plant(repo: Path, tmp_path: Path) -> Path:
    """Every way a repository's own files can make git run a program; returns the marker the
    programs would create."""
    marker = tmp_path / "MARKER"
    script = tmp_path / "evil.sh"
    script.write_text(f"#!/bin/sh\necho ran \"$@\" >> {marker}\ncat\n")
    script.chmod(0o755)
    included = tmp_path / "included.cfg"
    included.write_text(f"[core]\n\tfsmonitor = {script}\n[diff]\n\texternal = {script}\n")
    with open(repo / ".git" / "config", "a") as fh:
        fh.write(f"[core]\n\tfsmonitor = {script}\n\tpager = {script}\n\thooksPath = {tmp_path}/hooks\n"
                 f"[diff]\n\texternal = {script}\n"
                 f"[diff \"evil\"]\n\ttextconv = {script}\n\tcommand = {script}\n"
                 f"[filter \"evil\"]\n\tclean = {script}\n\tsmudge = {script}\n\tprocess = {script}\n"
                 f"\trequired = true\n"
                 f"[include]\n\tpath = {included}\n"
                 f"[includeIf \"gitdir:/\"]\n\tpath = {included}\n"
                 f"[core]\n\tsshCommand = {script}\n\teditor = {script}\n")
    (repo / ".gitattributes").write_text("* diff=evil filter=evil\n")
    for hooks in (repo / ".git" / "hooks", tmp_path / "hooks"):
        hooks.mkdir(exist_ok=True)
        for hook in ("post-index-change", "pre-commit", "post-checkout", "fsmonitor-watchman"):
            (hooks / hook).write_text(f"#!/bin/sh\necho hook {hook} >> {marker}\n")
            (hooks / hook).chmod(0o755)
    return marker


@needs_git
async def test_a_hostile_git_config_runs_nothing(repo, tmp_path):
    marker = plant(repo, tmp_path)
    assert not marker.exists()
    (repo / "f.txt").write_text("one\nchanged\n")
    (repo / "new.txt").write_text("new\n")
    d = await diff(repo)
    assert not marker.exists(), marker.read_text()
    assert "M f.txt  +1 −1" in d.summary and "A new.txt  +1" in d.summary
    assert b"+changed\n" in (d.patch or b"")


@needs_git
def test_the_planted_config_would_run_under_plain_git(repo, tmp_path):
    """The attack above is real: plain git, even with every -c switch, runs the repository's filter."""
    marker = plant(repo, tmp_path)
    (repo / "f.txt").write_text("one\nchanged\n")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": "/dev/null"}
    subprocess.run(["git", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null", "-c", "diff.external=",
                    "diff", "--no-ext-diff", "--no-textconv", "HEAD"], cwd=repo, env=env, capture_output=True,
                   timeout=20)
    assert marker.exists()


@needs_git
async def test_a_nested_repository_with_a_hostile_config_runs_nothing(repo, tmp_path):
    inner = repo / "vendor"
    inner.mkdir()
    git(inner, "init", "-q")
    (inner / "x.txt").write_text("x\n")
    git(inner, "add", ".")
    git(inner, "commit", "-qm", "x")
    marker = plant(inner, tmp_path)
    (inner / "x.txt").write_text("dirty\n")
    await diff(repo)
    assert not marker.exists(), marker.read_text()


def other_repo(tmp_path: Path) -> Path:
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q", "-b", "main")
    (other / "private.txt").write_bytes(SECRET + b"\n")
    git(other, "add", ".")
    git(other, "commit", "-qm", "private")
    return other


@needs_git
@pytest.mark.parametrize("how", ["objects", "refs", "packed-refs", "alternates", "gitfile", "gitlink", "head"])
async def test_a_repository_pointing_outside_the_workspace_shows_nothing_from_there(ws, tmp_path, how):
    other = other_repo(tmp_path)
    git(ws, "init", "-q", "-b", "main")
    (ws / "mine.txt").write_text("mine\n")
    since = time.time() - 60
    dot = ws / ".git"
    if how == "objects":  # borrow the other repository's objects and refs
        shutil.rmtree(dot / "objects")
        os.symlink(other / ".git" / "objects", dot / "objects")
        shutil.rmtree(dot / "refs")
        os.symlink(other / ".git" / "refs", dot / "refs")
    elif how == "refs":
        shutil.rmtree(dot / "refs" / "heads")
        os.symlink(other / ".git" / "refs" / "heads", dot / "refs" / "heads")
        (dot / "objects" / "pack").rmdir()
        os.symlink(other / ".git" / "objects" / "pack", dot / "objects" / "pack")
        git(other, "gc", "-q")
    elif how == "packed-refs":
        git(other, "gc", "-q")
        os.symlink(other / ".git" / "packed-refs", dot / "packed-refs")
        (dot / "objects" / "pack").rmdir()
        os.symlink(other / ".git" / "objects" / "pack", dot / "objects" / "pack")
    elif how == "alternates":
        (dot / "objects" / "info" / "alternates").write_text(f"{other}/.git/objects\n")
        head = git(other, "rev-parse", "HEAD").strip()
        (dot / "refs" / "heads" / "main").write_text(head + "\n")
    elif how == "gitfile":  # a worktree pointer naming the other repository
        shutil.rmtree(dot)
        dot.write_text(f"gitdir: {other}/.git\n")
    elif how == "gitlink":
        shutil.rmtree(dot)
        os.symlink(other / ".git", dot)
    elif how == "head":
        (dot / "HEAD").unlink()
        os.symlink(other / ".git" / "HEAD", dot / "HEAD")
    d = await diff(ws, since=since)
    shown = d.summary.encode() + (d.patch or b"")
    assert SECRET not in shown and b"private.txt" not in shown
    assert d.patch is None
    assert "mine.txt" in d.summary  # listed by time instead
    assert "cannot be read safely" in d.summary or "not a plain folder" in d.summary


@needs_git
async def test_git_that_hangs_is_killed_at_the_timeout(repo, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pids = tmp_path / "pids"
    fake = bin_dir / "git"
    fake.write_text(f"#!/bin/sh\necho $$ >> {pids}\nexec sleep 30\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    start = time.monotonic()
    d = await diff(repo, timeout=0.3)
    assert time.monotonic() - start < 3
    assert d.summary == "git took longer than 0.3 s to read the workspace; try again later or ask the agent " \
                        "for a smaller change."
    assert d.patch is None
    assert pids.read_text().split() and not any(running(int(pid)) for pid in pids.read_text().split())


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


@needs_git
async def test_a_broken_repository_gets_a_clear_line_not_an_exception(repo):
    (repo / ".git" / "index").write_bytes(b"DIRC garbage")
    (repo / "f.txt").write_text("x\n")
    d = await diff(repo)
    assert d.summary == "git could not read the repository in the workspace." and d.patch is None


# --- /diff without git --------------------------------------------------------------------------------


async def test_without_git_and_without_a_start_time_it_says_it_cannot_tell(ws):
    (ws / "a.txt").write_text("a")
    d = await diff(ws)
    assert d.patch is None
    assert d.summary == "The workspace is not a git repository, and without a start time the changes cannot be told."


async def test_without_git_it_lists_the_files_changed_since_the_start_with_sizes(ws, outside):
    (ws / "before.txt").write_text("old")
    past = time.time() - 3600
    os.utime(ws / "before.txt", (past, past))
    since = time.time() - 60
    (ws / "sub").mkdir()
    (ws / "sub" / "after.txt").write_bytes(b"x" * 3000)
    (ws / "tiny.txt").write_bytes(b"abc")
    os.symlink(outside / "secret.txt", ws / "link.txt")
    os.symlink(outside, ws / "homelink")
    os.mkfifo(ws / "pipe")
    d = await diff(ws, since=since)
    lines = d.summary.splitlines()
    assert lines[0] == "2 files changed since this session started (no git repository, so no patch):"
    assert sorted(lines[1:]) == ["sub/after.txt  3 KiB", "tiny.txt  3 B"]
    assert d.patch is None


async def test_without_git_nothing_changed_says_so(ws, zh):
    (ws / "a.txt").write_text("a")
    d = await diff(ws, since=time.time() + 10)
    assert d.summary == "自本会话开始以来，工作区没有文件改动。"


async def test_a_missing_workspace_is_not_an_error(tmp_path):
    d = await diff(tmp_path / "nope")
    assert d.patch is None and "does not exist" in d.summary


async def test_without_git_installed_the_repository_is_listed_by_time(repo, monkeypatch):
    monkeypatch.setattr(wf.shutil, "which", lambda name: None)
    (repo / "f.txt").write_text("changed")
    d = await diff(repo, since=time.time() - 60)
    assert d.summary.startswith("git is not installed here") and "f.txt" in d.summary


def test_the_listing_walk_is_bounded(ws, monkeypatch):
    monkeypatch.setattr(wf, "MAX_LISTED", 50)
    for n in range(200):
        (ws / f"f{n}").write_text("x")
    text = wf._changed_since(ws, 0.0, 5.0)
    assert "may be incomplete" in text


def test_fifo_in_git_metadata_does_not_hang(ws):
    (ws / ".git" / "objects").mkdir(parents=True)
    (ws / ".git" / "refs").mkdir()
    os.mkfifo(ws / ".git" / "HEAD")
    start = time.monotonic()
    with pytest.raises(wf._NotTrusted):
        wf._private_gitdir(ws / ".git", ws.parent / "private")
    assert time.monotonic() - start < 1
    assert stat.S_ISFIFO(os.lstat(ws / ".git" / "HEAD").st_mode)


async def test_diff_is_usable_from_a_running_loop_concurrently(ws):
    (ws / "a.txt").write_text("a")
    results = await asyncio.gather(*(diff(ws, since=0.0) for _ in range(5)))
    assert all("a.txt" in r.summary for r in results)
