import importlib.util
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from runners_cli.__main__ import main
from runners_cli.build import (
    README_FILES,
    listing_problems,
    parse_requirements,
    readme_problems,
    validate_plugin,
)
from runners_cli.host import LocalHost
from runners_cli.plugins import ROOT, load_plugin
from runners_cli.scaffold import scaffold
from tests.helpers import failure, make_runner, run

# what a new plugin needs outside its directory, for acme-agent / AcmeAgent
SHARED_FILES = [
    "tests/fakes/acme.py",
    "tests/fakes_selftest/test_fake_acme.py",
    "tests/contract/case_acme_agent.py",
    "tests/plugins/test_acme_agent.py",
    "bench/entries/acme_agent.py",
]


def _new(root: Path):
    return scaffold("acme-agent", "AcmeAgent", "Acme", root=root)


def _load(name: str, path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """Import a scaffolded file under the name it would have in the repository."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


async def test_new_plugin_validates_loads_and_fails_clearly_until_written(tmp_path):
    path = _new(tmp_path).directory
    problems = validate_plugin(path).problems
    assert problems == []
    info = load_plugin(path)
    assert info.runner_id == "plugin:langbot-team/AcmeAgent/default"
    host = LocalHost()
    code, _, message = failure(await run(make_runner(info, host), host,
                                         config={"base-url": "http://127.0.0.1:1", "api-key": "k-123456"}))
    assert code == "runner.internal" and "not written yet" in message


def test_new_plugin_has_its_page_in_both_languages(tmp_path):
    path = _new(tmp_path).directory
    info = load_plugin(path)
    keys = [item["name"] for item in info.config_items]
    assert keys, "the scaffolded runner YAML declares no config"
    for readme in README_FILES:
        assert (path / readme).is_file(), readme
    # both pages exist, name every field of the scaffolded form by its label in the page's language,
    # keep tables narrow, and share the same sections
    # … and start the "What it does when…" table with cells the check refuses until they are written
    problems = readme_problems(path, info.config_items)
    assert len(problems) == 10 and all("is not written yet" in p for p in problems), problems
    assert "Acme" in (path / "readme" / "README_zh_Hans.md").read_text(encoding="utf-8")


def test_new_plugin_lists_its_icon_and_description_as_not_written_yet(tmp_path):
    # LangBot's plugin list shows the icon, label and description: the scaffold's grey square and
    # one-line description are placeholders the repository check refuses until they are written; the
    # label fits and is the same in the manifest and the runner component
    path = _new(tmp_path).directory
    problems = listing_problems(path)
    assert [p.split(":")[0] for p in problems] == ["assets/icon.svg", "manifest.yaml", "manifest.yaml"], problems
    assert all("not drawn yet" in p or "not written yet" in p for p in problems), problems
    assert "description en_US" in problems[1] and "description zh_Hans" in problems[2]
    # a platform name too long for the list is named as such
    long = scaffold("bailian-agent", "BailianAgent", "Alibaba Bailian", root=tmp_path).directory
    assert [p for p in listing_problems(long) if "label" in p] == [
        "manifest.yaml: label en_US 'Alibaba Bailian Agent' is 21 columns wide; LangBot's plugin list cuts it "
        "after 13 (a Chinese character counts two): shorten it here and in the runner component",
        "manifest.yaml: label zh_Hans 'Alibaba Bailian 智能体' is 22 columns wide; LangBot's plugin list cuts it "
        "after 13 (a Chinese character counts two): shorten it here and in the runner component"]


def test_new_plugin_declares_what_the_vendored_kit_imports(tmp_path):
    # runner_kit is copied into every package: the new plugin needs what every other plugin declares
    def names(path: Path) -> set[str]:
        return {r.name for r in parse_requirements(path)}

    assert names(ROOT / "dify-agent" / "requirements.txt") <= names(_new(tmp_path).directory / "requirements.txt")


def test_bad_names_and_existing_dirs_refused(tmp_path):
    with pytest.raises(ValueError):
        scaffold("Bad_Dir", "AcmeAgent", "Acme", root=tmp_path)
    with pytest.raises(ValueError):
        scaffold("acme", "acme", "Acme", root=tmp_path)
    with pytest.raises(ValueError, match="platform"):
        scaffold("acme", "Acme", 'Ac"me', root=tmp_path)
    scaffold("acme", "Acme", "Acme", root=tmp_path)
    with pytest.raises(FileExistsError):
        scaffold("acme", "Acme", "Acme", root=tmp_path)


def test_new_plugin_gets_every_file_it_needs_outside_its_directory(tmp_path):
    made = _new(tmp_path)
    assert made.directory == tmp_path / "acme-agent"
    for rel in SHARED_FILES:
        assert (tmp_path / rel).is_file(), rel
        assert Path(rel) in made.files
    for rel in made.files:  # every file written is valid Python where it is Python
        path = tmp_path / rel
        assert path.is_file(), rel
        if path.suffix == ".py":
            compile(path.read_text(encoding="utf-8"), str(rel), "exec")
    # nothing lands outside the given root (the repository's own suites are untouched)
    assert not (ROOT / "tests" / "contract" / "case_acme_agent.py").exists()
    assert not (ROOT / "bench" / "entries" / "acme_agent.py").exists()


def test_scaffolded_suites_import_and_fail_clearly_until_written(tmp_path, monkeypatch):
    _new(tmp_path)
    import tests.fakes  # noqa: F401 - the scaffolded fake imports its siblings relatively

    fake = _load("tests.fakes.acme", tmp_path / "tests/fakes/acme.py", monkeypatch)
    with pytest.raises(NotImplementedError, match=r"tests/fakes/acme\.py: the fake Acme server is not written yet"):
        fake.FakeAcme(api_key="k")

    case_module = _load("tests.contract.case_acme_agent", tmp_path / "tests/contract/case_acme_agent.py",
                        monkeypatch)
    (case,) = case_module.cases()
    assert case.plugin == "acme-agent"
    # the config it gives the runner uses the keys the scaffolded runner declares
    declared = {item["name"] for item in load_plugin(tmp_path / "acme-agent").config_items}
    config = case.config(SimpleNamespace(base_url="http://127.0.0.1:1"))
    assert set(config) <= declared and config["base-url"] == "http://127.0.0.1:1"
    assert case.secrets(None) == [config["api-key"]]
    with pytest.raises(NotImplementedError, match="not written yet"):
        case.start_server()

    entry = _load("bench.entries.acme_agent", tmp_path / "bench/entries/acme_agent.py", monkeypatch).ENTRY
    assert entry.plugin == "acme-agent" and set(entry.config("http://127.0.0.1:1")) <= declared
    with pytest.raises(NotImplementedError, match="not written yet"):
        entry.start_server()
    for call in (lambda: entry.run_key(None), lambda: entry.is_token_write(b"data: x"),
                 lambda: entry.floor_request("http://127.0.0.1:1", "hi"), lambda: entry.floor_token({})):
        with pytest.raises(NotImplementedError, match=r"bench/entries/acme_agent\.py: .* not written yet"):
            call()

    tests_module = _load("tests.plugins.test_acme_agent", tmp_path / "tests/plugins/test_acme_agent.py",
                         monkeypatch)
    assert tests_module.PLUGIN == "acme-agent"
    selftest = _load("tests.fakes_selftest.test_fake_acme", tmp_path / "tests/fakes_selftest/test_fake_acme.py",
                     monkeypatch)
    with pytest.raises(NotImplementedError, match="not written yet"):
        selftest.test_a_chat_request_streams_the_answer(None)


def test_nothing_is_overwritten(tmp_path):
    mine = tmp_path / "tests" / "contract" / "case_acme_agent.py"
    mine.parent.mkdir(parents=True)
    mine.write_text("# mine\n", encoding="utf-8")
    with pytest.raises(FileExistsError, match=r"tests/contract/case_acme_agent\.py.*nothing was written"):
        _new(tmp_path)
    assert mine.read_text(encoding="utf-8") == "# mine\n"
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) == [
        "tests/contract/case_acme_agent.py"
    ]
    assert not (tmp_path / "acme-agent").exists()


def test_another_platforms_fake_keeps_its_name(tmp_path):
    theirs = tmp_path / "tests" / "fakes" / "acme.py"
    theirs.parent.mkdir(parents=True)
    theirs.write_text("# another platform's fake\n", encoding="utf-8")
    made = _new(tmp_path)
    assert theirs.read_text(encoding="utf-8") == "# another platform's fake\n"
    assert Path("tests/fakes/acme_agent.py") in made.files
    assert "from tests.fakes.acme_agent import FakeAcme" in (
        tmp_path / "tests/contract/case_acme_agent.py").read_text(encoding="utf-8")
    assert any("tests/fakes/acme_agent.py" in step for step in made.steps)


def test_runners_new_prints_the_numbered_steps_naming_each_file(tmp_path, capsys):
    assert main(["new", "acme-agent", "AcmeAgent", "--platform", "Acme", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    steps = [line.strip() for line in out.splitlines() if line.strip()[:2].rstrip(".").isdigit()]
    assert [s.split(".", 1)[0] for s in steps] == [str(i) for i in range(1, len(steps) + 1)]
    text = "\n".join(steps)
    for rel in [*SHARED_FILES, "acme-agent/acme_agent/adapter.py", "acme-agent/manifest.yaml",
                "acme-agent/assets/icon.svg", "tests/e2e/test_plugins_e2e.py", "tests/test_repo_check.py"]:
        assert rel in text, f"no step names {rel}:\n{out}"
        assert (tmp_path / rel).is_file() or rel in ("tests/e2e/test_plugins_e2e.py", "tests/test_repo_check.py")
    for what in ("EXPECTED", "USAGE", "MIGRATION_KEYS", "REAL_PEERS", "tests/real_peers/"):
        assert what in text, what
    # the case lives in case_<package>.py and is listed by name in cases.py: the step says both
    assert 'tests/contract/cases.py (PLUGIN_CASE_MODULES: "acme-agent": "case_acme_agent")' in text

    assert main(["new", "acme-agent", "AcmeAgent", "--platform", "Acme", "--root", str(tmp_path)]) == 2
    assert "already exists" in capsys.readouterr().err
