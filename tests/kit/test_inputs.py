import asyncio
import base64
import threading

import pytest

from runner_kit.errors import RunnerError
from runner_kit.inputs import UserInput, collect_input
from runners_cli.host import LocalHost

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x02" * 16).decode()


def ctx(**kw):
    return LocalHost().make_context(kw.pop("text", "hi"), **kw)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_text_images_files_and_params():
    c = ctx(text="look", contents=[{"type": "text", "text": "look"}, {"type": "image_base64", "image_base64": PNG},
                      {"type": "image_url", "image_url": {"url": "https://example.invalid/a/cat.jpg?x=1"}},
                      {"type": "file_base64", "file_base64": b64(b"doc"), "file_name": "r.pdf"}],
            params={"p": 1})
    inp = await collect_input(c)
    assert inp.text == "look" and inp.params == {"p": 1} and inp.skipped == [] and not inp.empty
    kinds = [(f.kind, f.name, f.mime_type) for f in inp.files]
    assert kinds[0][0] == "image" and kinds[0][2] == "image/png"
    assert kinds[1] == ("image", "cat.jpg", "image/jpeg") and inp.files[1].url.endswith("cat.jpg?x=1")
    assert kinds[2] == ("file", "r.pdf", "application/pdf") and inp.files[2].data == b"doc"


async def test_attachment_sources_and_dedup(tmp_path):
    p = tmp_path / "note.txt"
    p.write_bytes(b"abc")
    c = ctx(attachments=[{"type": "file", "path": str(p)}, {"type": "image", "source": "base64", "content": PNG},
                         {"type": "image", "source": "base64", "content": PNG}, {"type": "file", "url": "http://h/x.csv"}])
    inp = await collect_input(c, allowed_dirs=[str(tmp_path)])
    assert [f.name for f in inp.files] == ["note.txt", "image-2.png", "x.csv"]
    assert inp.files[0].data == b"abc" and inp.skipped == []


async def test_data_urls():
    c = ctx(contents=[{"type": "image_url", "image_url": {"url": "data:image/gif;base64," + b64(b"GIF89a..")}},
                      {"type": "file_url", "file_url": "DATA:text/plain;base64," + b64(b"hello"), "file_name": "n"}])
    files = (await collect_input(c)).files
    assert (files[0].name, files[0].mime_type, files[0].data) == ("image-1.gif", "image/gif", b"GIF89a..")
    assert (files[1].name, files[1].mime_type, files[1].data) == ("n.txt", "text/plain", b"hello")


async def test_size_cap_names_file_and_config_key():
    big = b64(b"\0" * 3000)
    with pytest.raises(RunnerError) as info:
        await collect_input(ctx(contents=[{"type": "file_base64", "file_base64": big, "file_name": "huge.zip"}]),
                            max_bytes=1000)
    assert info.value.code == "input.too_large" and "huge.zip" in info.value.message
    assert "max-file-size-mb" in info.value.message


@pytest.mark.parametrize("limit", [999, 1000, 1001])  # 0, 2 and 1 '=' of padding
@pytest.mark.parametrize("wrap", [False, True], ids=["flat", "mime-lines"])
async def test_base64_exactly_at_limit_passes_and_one_more_byte_fails(limit, wrap):
    enc = base64.encodebytes if wrap else base64.b64encode

    def content(n):
        return [{"type": "file_base64", "file_base64": enc(b"\x07" * n).decode(), "file_name": "f.bin"}]

    inp = await collect_input(ctx(contents=content(limit)), max_bytes=limit)
    assert inp.files[0].size == limit
    with pytest.raises(RunnerError) as info:
        await collect_input(ctx(contents=content(limit + 1)), max_bytes=limit)
    assert info.value.code == "input.too_large"
    # just over the limit the message says bytes, not "0.0 MiB; the limit is 0.0 MiB"
    assert f"{limit + 1} bytes" in info.value.message and "max-file-size-mb" in info.value.message


async def test_invalid_base64_is_unreadable():
    with pytest.raises(RunnerError) as info:
        await collect_input(ctx(attachments=[{"type": "file", "name": "bad.bin", "content": "abcde"}]))
    assert info.value.code == "input.unreadable" and "bad.bin" in info.value.message


async def test_large_base64_is_decoded_off_the_event_loop(monkeypatch):
    real, threads = base64.b64decode, []

    def spy(*a, **kw):
        threads.append(threading.get_ident())
        return real(*a, **kw)

    monkeypatch.setattr(base64, "b64decode", spy)
    data = bytes(range(256)) * 1200  # 300 KiB
    inp = await collect_input(ctx(contents=[{"type": "file_base64", "file_base64": b64(data), "file_name": "a.bin"}]))
    assert inp.files[0].data == data
    assert threads and threading.get_ident() not in threads


async def test_unsupported_scheme_and_unusable_attachments_are_skipped(caplog):
    caplog.set_level("INFO", logger="runner_kit.inputs")
    c = ctx(text="what is this?",
            contents=[{"type": "text", "text": "what is this?"},
                      {"type": "file_url", "file_url": "ftp://x/y", "file_name": "y"}],
            attachments=[{"type": "voice", "source": "message_chain", "id": "media-123"},
                         {"type": "file", "name": "ghost.doc"}, {"type": "image", "content": PNG}])
    inp = await collect_input(c)
    assert inp.text == "what is this?" and [f.kind for f in inp.files] == ["image"] and not inp.empty
    assert inp.skipped == ["'y' has an unsupported URL scheme (ftp:)", "'voice-1' has only a platform media id",
                           "'ghost.doc' has no content, url or path"]
    lines = [r.getMessage() for r in caplog.records if r.name == "runner_kit.inputs"]
    assert len(lines) == 3 and all("skipped" in line for line in lines)


async def test_nothing_usable_left_is_empty():
    inp = await collect_input(ctx(text="  \n", contents=[],
                                  attachments=[{"type": "image", "source": "message_chain", "id": "img-9"}]))
    assert inp.empty and inp.files == [] and inp.skipped == ["'image-1' has only a platform media id"]
    assert UserInput(text="", files=[], params={}).empty
    assert not UserInput(text="x", files=[], params={}).empty


async def test_refused_path_falls_back_to_url():
    c = ctx(attachments=[{"type": "file", "path": "/etc/hostname", "url": "https://h/report.pdf"}])
    inp = await collect_input(c, allowed_dirs=[])
    assert [(f.name, f.url, f.data) for f in inp.files] == [("report.pdf", "https://h/report.pdf", None)]
    assert inp.skipped == []


async def test_collect_input_is_a_coroutine():
    assert asyncio.iscoroutinefunction(collect_input)


@pytest.mark.parametrize("form", ["flat", "mime-lines", "crlf-lines", "junk", "data-url"])
async def test_large_base64_decodes_like_the_lenient_decoder(form):
    data = bytes(range(256)) * 9000 + b"\x01"  # ~2.2 MiB: several slices, one byte of padding
    flat = b64(data)
    text = {"flat": flat, "mime-lines": base64.encodebytes(data).decode(),
            "crlf-lines": base64.encodebytes(data).decode().replace("\n", "\r\n"),
            "junk": flat[:1000] + "!" + flat[1000:],  # the lenient decoder drops non-alphabet characters
            "data-url": "data:application/octet-stream;base64," + flat}[form]
    limit = len(data) + (8 if form == "junk" else 0)  # a junk character counts towards the size estimate
    inp = await collect_input(ctx(contents=[{"type": "file_base64", "file_base64": text, "file_name": "a.bin"}]),
                              max_bytes=limit)
    assert inp.files[0].data == data


async def test_large_non_ascii_base64_is_unreadable():
    text = b64(b"\0" * 400_000) + "é"
    with pytest.raises(RunnerError) as info:
        await collect_input(ctx(contents=[{"type": "file_base64", "file_base64": text, "file_name": "a.bin"}]))
    assert info.value.code == "input.unreadable"


async def test_upload_all_keeps_order_and_raises_the_first_failure_itself():
    import asyncio

    from runner_kit.errors import RunnerError
    from runner_kit.inputs import InputFile, upload_all, upload_failed

    files = [InputFile(name=f"f{i}", mime_type="text/plain", data=b"x", kind="file") for i in range(3)]
    cancelled = []

    async def ok(f):
        await asyncio.sleep(0.02 if f.name == "f0" else 0)
        return f.name

    assert await upload_all(files, ok) == ["f0", "f1", "f2"]
    assert await upload_all([], ok) == []

    async def one_fails(f):
        if f.name == "f1":
            raise upload_failed(f.name, RunnerError("upstream.too_large", "HTTP 413", status=413))
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.append(f.name)
            raise
        return f.name

    try:
        await upload_all(files, one_fails)
    except RunnerError as err:
        assert (err.code, err.status, err.message) == ("upstream.too_large", 413, "uploading 'f1' failed: HTTP 413")
    else:
        raise AssertionError("a failed upload fails the run")
    assert sorted(cancelled) == ["f0", "f2"], "the other uploads are cancelled"


@pytest.mark.parametrize(("given", "expected"), [
    ("Screenshot 2026-12-06 at 12:30:05.png", "Screenshot 2026-12-06 at 12_30_05.png"),  # macOS names
    ('what?"<is>|this*.txt', "what___is__this_.txt"),
    ("../../etc/passwd", "____etc_passwd"),
    ("C:\\Users\\ann\\report.pdf", "C__Users_ann_report.pdf"),
    ("invoice\u202efdp.exe", "invoice_fdp.exe"),  # a direction mark never reverses the shown name
    ("line\nbreak\r.txt", "line_break_.txt"),
    ("", "file"),
    ("...", "_"),
    (" .hidden ", "hidden"),
    ("报告.docx", "报告.docx"),
    ("a." + "x" * 40, "a." + "x" * 40),  # an "extension" too long to be one stays in the name
])
def test_safe_file_name_is_taken_by_every_upload_route(given, expected):
    from runner_kit.inputs import safe_file_name

    assert safe_file_name(given) == expected


def test_safe_file_name_cuts_the_name_not_the_extension():
    from runner_kit.inputs import safe_file_name

    name = safe_file_name("长" * 100 + ".pdf")
    assert name.endswith(".pdf") and len(name.removesuffix(".pdf").encode()) <= 120
    assert name.removesuffix(".pdf") == "长" * 40  # whole characters only
