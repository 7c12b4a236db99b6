"""Chat users must not make the plugin read its host's files (file:// URLs, paths, FIFOs)."""

import asyncio
import builtins
import io
import os
import threading
import time

import pytest

from runner_kit.errors import RunnerError
from runner_kit.inputs import FILE_DIRS_ENV, collect_input
from runners_cli.host import LocalHost

SECRET = b"TOP-SECRET-host-bytes-0123456789"


def ctx(**kw):
    return LocalHost().make_context(kw.pop("text", "hi"), **kw)


@pytest.fixture
def secret(tmp_path):
    p = tmp_path / "secret.txt"
    p.write_bytes(SECRET)
    return p


@pytest.fixture
def allowed(tmp_path):
    d = tmp_path / "allowed"
    d.mkdir()
    return d


@pytest.fixture
def touched(monkeypatch):
    """File-system calls (open/stat) made with a path naming secret.txt."""
    calls = []

    def spy(name, real):
        def wrapper(path, *a, **kw):
            if isinstance(path, (str, bytes, os.PathLike)) and "secret.txt" in os.fsdecode(path):
                calls.append((name, os.fsdecode(path)))
            return real(path, *a, **kw)

        return wrapper

    for mod, name in [(builtins, "open"), (io, "open"), (os, "open"), (os, "stat"), (os, "lstat")]:
        monkeypatch.setattr(mod, name, spy(name, getattr(mod, name)))
    return calls


def no_secret(inp):
    for f in inp.files:
        assert f.data is None or SECRET not in f.data
        assert f.url is None or "secret" not in f.url


async def test_file_url_in_image_content_is_skipped_never_read(secret, touched, caplog):
    c = ctx(text="see", contents=[{"type": "text", "text": "see"},
                                  {"type": "image_url", "image_url": {"url": secret.as_uri()}}])
    # refused even when the file's directory is allow-listed: only attachment paths can be allowed
    inp = await collect_input(c, allowed_dirs=[str(secret.parent)])
    no_secret(inp)
    assert inp.files == [] and inp.text == "see" and not inp.empty and touched == []
    assert inp.skipped == ["'image-2' is a local file:// URL, which is never read"]
    assert "secret" not in caplog.text and SECRET.decode() not in caplog.text


@pytest.mark.parametrize("url", ["file:///etc/passwd", "FILE:///proc/self/environ", " file:///etc/hostname"])
async def test_file_url_system_files_are_skipped(url):
    inp = await collect_input(ctx(contents=[{"type": "file_url", "file_url": url, "file_name": "x"}]))
    assert inp.files == [] and inp.skipped == ["'x' is a local file:// URL, which is never read"]


async def test_file_url_attachment_is_skipped_never_read(secret, touched):
    c = ctx(text="", attachments=[{"type": "file", "source": "url", "url": secret.as_uri(), "name": "s.txt"}])
    inp = await collect_input(c, allowed_dirs=[str(secret.parent)])
    no_secret(inp)
    assert inp.files == [] and touched == [] and inp.empty
    assert inp.skipped == ["'s.txt' is a local file:// URL, which is never read"]


@pytest.mark.parametrize("path", ["../../../../etc/hostname", "../../etc/hostname", "/etc/hostname", "/proc/self/environ"])
async def test_paths_outside_are_skipped(path, allowed):
    inp = await collect_input(ctx(text="", attachments=[{"type": "file", "path": path}]), allowed_dirs=[str(allowed)])
    assert inp.files == [] and inp.empty
    assert inp.skipped == ["'file-1' has a path outside the allowed directories"]


async def test_dotdot_out_of_allowed_dir_is_refused_without_touching(secret, allowed, touched):
    path = str(allowed) + "/../secret.txt"
    inp = await collect_input(ctx(attachments=[{"type": "file", "path": path}]), allowed_dirs=[str(allowed)])
    no_secret(inp)
    assert inp.files == [] and touched == [] and "outside the allowed directories" in inp.skipped[0]


async def test_paths_are_refused_by_default_without_touching(secret, touched, monkeypatch):
    monkeypatch.delenv(FILE_DIRS_ENV, raising=False)
    inp = await collect_input(ctx(attachments=[{"type": "file", "path": str(secret), "name": "s.txt"}]))
    no_secret(inp)
    assert inp.files == [] and touched == []
    assert inp.skipped == ["'s.txt' is a local path, and reading local files is not enabled"]


async def test_path_inside_allowed_dir_is_read_off_the_loop(allowed, monkeypatch):
    (allowed / "report.pdf").write_bytes(b"%PDF-1.7 body")
    real_open, threads = os.open, []

    def spy(path, *a, **kw):
        if os.fsdecode(path).endswith("report.pdf"):
            threads.append(threading.get_ident())
        return real_open(path, *a, **kw)

    monkeypatch.setattr(os, "open", spy)
    inp = await collect_input(ctx(attachments=[{"type": "file", "path": str(allowed / "report.pdf")}]),
                              allowed_dirs=[str(allowed)])
    assert [(f.name, f.mime_type, f.data) for f in inp.files] == [("report.pdf", "application/pdf", b"%PDF-1.7 body")]
    assert threads and threading.get_ident() not in threads


async def test_allow_list_from_environment(tmp_path, allowed, monkeypatch):
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.txt").write_bytes(b"from env")
    monkeypatch.setenv(FILE_DIRS_ENV, os.pathsep.join([str(allowed), "relative/ignored", str(other)]))
    inp = await collect_input(ctx(attachments=[{"type": "file", "path": str(other / "a.txt")}]))
    assert [f.data for f in inp.files] == [b"from env"]


async def test_allowed_dir_given_through_a_symlink(tmp_path, allowed):
    (allowed / "a.txt").write_bytes(b"via link")
    link = tmp_path / "link-to-allowed"
    link.symlink_to(allowed, target_is_directory=True)
    for path in (link / "a.txt", allowed / "a.txt"):
        inp = await collect_input(ctx(attachments=[{"type": "file", "path": str(path)}]), allowed_dirs=[str(link)])
        assert [f.data for f in inp.files] == [b"via link"]


async def test_symlink_inside_allowed_dir_pointing_outside_is_refused(secret, allowed):
    (allowed / "innocent.txt").symlink_to(secret)
    (allowed / "etc").symlink_to("/etc", target_is_directory=True)
    c = ctx(attachments=[{"type": "file", "path": str(allowed / "innocent.txt")},
                         {"type": "file", "path": str(allowed / "etc" / "hostname")}])
    inp = await collect_input(c, allowed_dirs=[str(allowed)])
    no_secret(inp)
    assert inp.files == [] and len(inp.skipped) == 2
    assert all("outside the allowed directories" in s for s in inp.skipped)


@pytest.mark.timeout(10)
async def test_fifo_inside_allowed_dir_is_skipped_without_stalling(allowed):
    fifo = allowed / "pipe.txt"
    os.mkfifo(fifo)
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    before, start = ticks, time.monotonic()
    try:
        inp = await collect_input(ctx(attachments=[{"type": "file", "path": str(fifo), "name": "pipe.txt"}]),
                                  allowed_dirs=[str(allowed)])
    finally:
        task.cancel()
    assert time.monotonic() - start < 1.0
    assert ticks > before  # the loop ran other tasks while the path was checked
    assert inp.files == [] and inp.skipped == ["'pipe.txt' is not a regular file"]


async def test_slow_disk_read_does_not_block_the_loop(allowed, monkeypatch):
    (allowed / "slow.bin").write_bytes(b"x" * 10)
    real_read = os.read

    def slow_read(fd, n):
        time.sleep(0.3)
        return real_read(fd, n)

    monkeypatch.setattr(os, "read", slow_read)
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    task = asyncio.create_task(ticker())
    try:
        inp = await collect_input(ctx(attachments=[{"type": "file", "path": str(allowed / "slow.bin")}]),
                                  allowed_dirs=[str(allowed)])
    finally:
        task.cancel()
    assert inp.files[0].data == b"x" * 10
    assert ticks >= 10


async def test_directory_and_missing_paths_are_skipped(allowed):
    (allowed / "sub").mkdir()
    c = ctx(attachments=[{"type": "file", "path": str(allowed / "sub"), "name": "sub"},
                         {"type": "file", "path": str(allowed / "missing.txt"), "name": "missing.txt"}])
    inp = await collect_input(c, allowed_dirs=[str(allowed)])
    assert inp.files == [] and inp.skipped == ["'sub' is not a regular file",
                                               "cannot read 'missing.txt': No such file or directory"]


async def test_oversized_allowed_file_still_fails(allowed):
    (allowed / "big.bin").write_bytes(b"\0" * 2000)
    (allowed / "fits.bin").write_bytes(b"\1" * 1000)
    with pytest.raises(RunnerError) as info:
        await collect_input(ctx(attachments=[{"type": "file", "path": str(allowed / "big.bin")}]),
                            allowed_dirs=[str(allowed)], max_bytes=1000)
    assert info.value.code == "input.too_large" and "big.bin" in info.value.message
    inp = await collect_input(ctx(attachments=[{"type": "file", "path": str(allowed / "fits.bin")}]),
                              allowed_dirs=[str(allowed)], max_bytes=1000)
    assert inp.files[0].size == 1000
