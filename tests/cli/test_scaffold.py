import pytest

from runners_cli.build import README_FILES, readme_problems, validate_plugin
from runners_cli.host import LocalHost
from runners_cli.plugins import load_plugin
from runners_cli.scaffold import scaffold
from tests.helpers import failure, make_runner, run


async def test_new_plugin_validates_loads_and_fails_clearly_until_written(tmp_path):
    path = scaffold("acme-agent", "AcmeAgent", "Acme", root=tmp_path)
    problems = validate_plugin(path).problems
    assert problems == []
    info = load_plugin(path)
    assert info.runner_id == "plugin:langbot-team/AcmeAgent/default"
    host = LocalHost()
    code, _, message = failure(await run(make_runner(info, host), host,
                                         config={"base-url": "http://127.0.0.1:1", "api-key": "k-123456"}))
    assert code == "runner.internal" and "not written yet" in message


def test_new_plugin_has_its_page_in_both_languages(tmp_path):
    path = scaffold("acme-agent", "AcmeAgent", "Acme", root=tmp_path)
    info = load_plugin(path)
    keys = [item["name"] for item in info.config_items]
    assert keys, "the scaffolded runner YAML declares no config"
    for readme in README_FILES:
        assert (path / readme).is_file(), readme
    # both pages exist, name every scaffolded key, keep tables narrow, and share the same sections
    assert readme_problems(path, keys) == []
    assert "Acme" in (path / "readme" / "README_zh_Hans.md").read_text(encoding="utf-8")


def test_bad_names_and_existing_dirs_refused(tmp_path):
    with pytest.raises(ValueError):
        scaffold("Bad_Dir", "AcmeAgent", "Acme", root=tmp_path)
    with pytest.raises(ValueError):
        scaffold("acme", "acme", "Acme", root=tmp_path)
    scaffold("acme", "Acme", "Acme", root=tmp_path)
    with pytest.raises(FileExistsError):
        scaffold("acme", "Acme", "Acme", root=tmp_path)
