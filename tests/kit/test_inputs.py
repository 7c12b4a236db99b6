import base64

import pytest

from runner_kit.errors import RunnerError
from runner_kit.inputs import collect_input
from runners_cli.host import LocalHost

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x02" * 16).decode()


def ctx(**kw):
    return LocalHost().make_context(kw.pop("text", "hi"), **kw)


def test_text_images_files_and_params():
    c = ctx(text="look", contents=[{"type": "text", "text": "look"}, {"type": "image_base64", "image_base64": PNG},
                      {"type": "image_url", "image_url": {"url": "https://example.invalid/a/cat.jpg?x=1"}},
                      {"type": "file_base64", "file_base64": base64.b64encode(b"doc").decode(), "file_name": "r.pdf"}],
            params={"p": 1})
    inp = collect_input(c)
    assert inp.text == "look" and inp.params == {"p": 1}
    kinds = [(f.kind, f.name, f.mime_type) for f in inp.files]
    assert kinds[0][0] == "image" and kinds[0][2] == "image/png"
    assert kinds[1] == ("image", "cat.jpg", "image/jpeg") and inp.files[1].url.endswith("cat.jpg?x=1")
    assert kinds[2] == ("file", "r.pdf", "application/pdf") and inp.files[2].data == b"doc"


def test_attachment_sources_and_dedup(tmp_path):
    p = tmp_path / "note.txt"
    p.write_bytes(b"abc")
    c = ctx(attachments=[{"type": "file", "path": str(p)}, {"type": "image", "source": "base64", "content": PNG},
                         {"type": "image", "source": "base64", "content": PNG}, {"type": "file", "url": "http://h/x.csv"}])
    files = collect_input(c).files
    assert [f.name for f in files] == ["note.txt", "image-2.png", "x.csv"]


def test_size_cap_names_file():
    big = base64.b64encode(b"\0" * 3000).decode()
    with pytest.raises(RunnerError) as info:
        collect_input(ctx(contents=[{"type": "file_base64", "file_base64": big, "file_name": "huge.zip"}]), max_bytes=1000)
    assert info.value.code == "input.too_large" and "huge.zip" in info.value.message


def test_unreadable_path_and_bad_scheme():
    with pytest.raises(RunnerError) as info:
        collect_input(ctx(attachments=[{"type": "file", "path": "/nonexistent/zz.doc", "name": "zz.doc"}]))
    assert info.value.code == "input.unreadable" and "zz.doc" in info.value.message
    with pytest.raises(RunnerError):
        collect_input(ctx(contents=[{"type": "file_url", "file_url": "ftp://x/y", "file_name": "y"}]))
