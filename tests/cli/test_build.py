"""``runners build``: every plugin packages, and every package imports and runs with nothing but its
own files and its requirements (the repository and its runner_kit are not importable)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from runners_cli.build import README_FILES, BuildError, build_all, build_plugin, sdk_build, validate_plugin
from runners_cli.plugins import ROOT, PluginInfo, discover, load_plugin
from tests.fakes.http_server import closed_port

PLUGINS = discover()
IDS = [p.dirname for p in PLUGINS]

# Config overrides for the dead-end run; keys not listed here are derived from the runner YAML
# (URL-like keys point at the closed port, required keys without a default get a dummy value).
FAKE_CLI = ROOT / "tests" / "fakes" / "cli"
# coding agents run their scripted CLI fake, which then fails to reach the model API on a closed port
DEAD_END_CONFIG: dict[str, dict[str, Any]] = {
    "DifyAgent": {"api-key": "app-isolation-test"},
    "ClaudeCodeAgent": {"executable": str(FAKE_CLI / "fake_claude.py"), "api-key": "sk-isolation-test",
                        "advanced-settings": True, "max-retries": 0, "langbot-tools": False},
    "ACPRunner": {"provider": "codex", "command": f"{sys.executable} {FAKE_CLI / 'acp_agent.py'}",
                  "api-key": "sk-isolation-test", "langbot-tools": False},
    "CodexAgent": {"executable": str(FAKE_CLI / "fake_codex.py"), "advanced-settings": True, "max-retries": 0,
                   "langbot-tools": False},
    # LangBot's own model, whose provider cannot be reached (the isolated host grants it, counts
    # tokens, and answers the model call the way LangBot does when its provider is down)
    "LocalAgent": {"model": {"primary": "iso-model", "fallbacks": [], "reasoning": {}}},
}
# models the isolated host grants (and whose calls it answers with LangBot's "Connection failed")
DEAD_END_MODELS: dict[str, list[str]] = {"LocalAgent": ["iso-model"]}

# Runs inside a fresh `python -I -S`: only the stdlib, the unpacked package (added by the SDK
# loader while it imports, exactly like the plugin runtime) and the installed requirements.
ISOLATED_SCRIPT = r"""
import asyncio, importlib.util, json, os, sys, time, uuid

mode, unpacked, site_dirs, repo_root, config = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4], json.loads(sys.argv[5])
models = json.loads(sys.argv[6]) if len(sys.argv) > 6 else []
real = os.path.realpath
sys.path[:] = [p for p in sys.path if p and real(p) != real(repo_root)] + site_dirs
os.chdir(unpacked)
out = {"sys_path": list(sys.path)}

from langbot_plugin.utils.discover.engine import ComponentDiscoveryEngine

engine = ComponentDiscoveryEngine()
plugin_manifest = engine.load_component_manifest("manifest.yaml", owner="builtin", no_save=True)
components = []
for group in plugin_manifest.spec["components"].values():
    components += engine.load_blueprint_comp_group(group, owner="builtin", no_save=True)
runner_comp = next(c for c in components if c.kind == "Runner" and c.metadata.name == "default")

plugin_cls = plugin_manifest.get_python_component_class()
if mode == "import-error":
    try:
        runner_comp.get_python_component_class()
    except ImportError as exc:
        out["import_error"] = str(exc)
    else:
        out["import_error"] = None
    print(json.dumps(out))
    sys.exit(0)

runner_cls = runner_comp.get_python_component_class()
out["runner_module_file"] = sys.modules[runner_cls.__module__].__file__
out["runner_kit_file"] = sys.modules["runner_kit"].__file__
out["repo_importable"] = importlib.util.find_spec("runners_cli") is not None

from langbot_plugin.api.definition.components.runner.runner import Runner
from langbot_plugin.api.entities.builtin.runner.context import RunnerContext

class Handler:
    def __init__(self):
        self.calls = []

    async def call_action(self, action, data, timeout=15.0):
        name = getattr(action, "value", action)
        self.calls.append(name)
        if name == "state_get":
            return {"value": None}
        if name in ("state_set", "state_delete"):
            return {"success": True}
        if name == "state_list":
            return {"keys": [], "has_more": False}
        if name == "count_tokens":
            return {"tokens": 1}
        if name == "invoke_llm":
            raise self.unreachable()
        return {}

    async def call_action_generator(self, action, data, timeout=15.0):
        self.calls.append(getattr(action, "value", action))
        raise self.unreachable()
        yield {}

    @staticmethod
    def unreachable():
        from langbot_plugin.entities.io.errors import ActionCallError
        return ActionCallError("RequesterError: Model request failed: Connection failed")

async def main():
    plugin = plugin_cls()
    await plugin.initialize()
    runner = runner_cls()
    assert isinstance(runner, Runner)
    runner.bind_runtime(plugin_runtime_handler=Handler(), plugin_identity="isolation/test")
    runner.plugin = plugin
    await runner.initialize()
    now = time.time()
    ctx = RunnerContext.model_validate({
        "run_id": str(uuid.uuid4()),
        "trigger": {"type": "message.received", "source": "platform", "timestamp": int(now)},
        "event": {"event_id": str(uuid.uuid4()), "event_type": "message.received", "source": "platform"},
        "conversation": {"conversation_id": "iso-conv", "sender_id": "iso-user"},
        "actor": {"actor_type": "user", "actor_id": "iso-user"},
        "input": {"text": "hello", "contents": [{"type": "text", "text": "hello"}], "attachments": []},
        "delivery": {"surface": "platform", "supports_streaming": True},
        "resources": {"models": [{"model_id": m, "model_type": "llm",
                                  "operations": ["invoke", "stream", "count_tokens"]} for m in models]},
        "context": {"conversation_id": "iso-conv"},
        "state": {"conversation": {}, "actor": {}, "subject": {}, "runner": {}},
        "runtime": {"deadline_at": now + 30},
        "config": config,
    })
    results = []
    async for r in runner.invoke(ctx):
        results.append({"type": getattr(r.type, "value", r.type), "data": r.data})
    return results

out["results"] = asyncio.run(main())
out["modules_outside"] = sorted(
    name for name, mod in sys.modules.items()
    if (name == "runner_kit" or name.startswith("runner_kit.") or name.split(".")[0] in ("components", "main"))
    and getattr(mod, "__file__", None) and not real(mod.__file__).startswith(real(unpacked) + os.sep)
)
print(json.dumps(out))
"""


def _site_dirs() -> list[str]:
    paths = sysconfig.get_paths()
    return list(dict.fromkeys([paths["purelib"], paths["platlib"]]))


def _dead_end_config(info: PluginInfo, root_url: str) -> dict[str, Any]:
    cfg: dict[str, Any] = {}
    for item in info.config_items:
        name, default = item["name"], item.get("default")
        url_like = isinstance(default, str) and default.startswith(("http://", "https://"))
        if url_like or name.endswith(("-url", "-base", "_url", "_base")):
            path = urlsplit(default).path if url_like else ""
            cfg[name] = root_url + path
        elif item.get("required") and default in (None, ""):
            cfg[name] = f"test-{name}"
    cfg.update(DEAD_END_CONFIG.get(info.name, {}))
    return cfg


def _run_isolated(mode: str, unpacked: Path, config: dict[str, Any] | None = None,
                  models: list[str] | None = None) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", ISOLATED_SCRIPT, mode, str(unpacked), json.dumps(_site_dirs()),
         str(ROOT), json.dumps(config or {}), json.dumps(models or [])],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=str(unpacked.parent),
        env={**{k: v for k, v in os.environ.items() if not k.startswith("PYTHON")},
             "RUNNER_KIT_DATA_DIR": str(unpacked.parent / "runner-data")},
    )
    assert proc.returncode == 0, f"isolated interpreter failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _unpack(lbpkg: Path, dest: Path) -> Path:
    dest.mkdir(parents=True)
    assert not any(dest.iterdir())
    with zipfile.ZipFile(lbpkg) as zf:
        zf.extractall(dest)
    return dest


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("build")
    paths, failures = build_all(PLUGINS, base / "dist", stage_root=base / "stage")
    assert not failures, "\n".join(f.report() for f in failures)
    by_name = {p.name: p for p in paths}
    return {info.dirname: by_name[info.package_name] for info in PLUGINS}


def test_plugins_are_discovered() -> None:
    assert "dify-agent" in IDS


@pytest.mark.parametrize("info", PLUGINS, ids=IDS)
def test_package_contents(built: dict[str, Path], info: PluginInfo) -> None:
    path = built[info.dirname]
    assert path.name == f"langbot-team-{info.name}-{info.version}.lbpkg"
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        manifest = yaml.safe_load(zf.read("manifest.yaml"))
    assert manifest["metadata"]["name"] == info.name
    for n in names:
        parts = n.split("/")
        assert ".stage" not in parts and "__pycache__" not in parts and ".env" not in parts, n
        assert not n.endswith((".pyc", ".lbpkg")), n
    assert "runner_kit/__init__.py" in names
    assert "requirements.txt" in names
    # the plugin page: README.md for an English UI, readme/README_<language>.md otherwise
    for readme in README_FILES:
        assert readme in names, f"{readme} is missing from the package"
    with zipfile.ZipFile(path) as zf:
        for readme in README_FILES:
            assert zf.read(readme) == (info.directory / readme).read_bytes(), readme
    kit = {p.relative_to(ROOT).as_posix() for p in (ROOT / "runner_kit").glob("*.py")}
    assert kit <= set(names), f"kit files missing from the package: {sorted(kit - set(names))}"


@pytest.mark.parametrize("info", PLUGINS, ids=IDS)
def test_package_runs_in_isolation(built: dict[str, Path], info: PluginInfo, tmp_path: Path) -> None:
    unpacked = _unpack(built[info.dirname], tmp_path / "unpacked").resolve()
    root_url = f"http://127.0.0.1:{closed_port()}"
    out = _run_isolated("run", unpacked, _dead_end_config(info, root_url), DEAD_END_MODELS.get(info.name))

    assert str(ROOT) not in out["sys_path"]
    assert not out["repo_importable"], "the repository is importable inside the isolated interpreter"
    assert Path(out["runner_kit_file"]).resolve().is_relative_to(unpacked), out["runner_kit_file"]
    assert Path(out["runner_module_file"]).resolve().is_relative_to(unpacked), out["runner_module_file"]
    assert out["modules_outside"] == []

    results = out["results"]
    types = [r["type"] for r in results]
    terminal = [r for r in results if r["type"] in ("run.completed", "run.failed")]
    assert len(terminal) == 1 and results[-1] is terminal[0], types
    failed = terminal[0]
    assert failed["type"] == "run.failed", types
    assert failed["data"]["code"] == "upstream.unavailable", failed
    assert failed["data"]["retryable"] is True


@pytest.mark.parametrize("info", PLUGINS, ids=IDS)
def test_plain_lbp_build_fails_with_a_hint(info: PluginInfo, tmp_path: Path) -> None:
    plain = tmp_path / "plain" / info.dirname
    shutil.copytree(info.directory, plain, ignore=shutil.ignore_patterns("__pycache__", ".env", "dist"))
    assert not (plain / "runner_kit").exists()
    lbpkg = sdk_build(plain, tmp_path / "plain-dist")
    unpacked = _unpack(lbpkg, tmp_path / "unpacked").resolve()
    out = _run_isolated("import-error", unpacked)
    assert out["import_error"] is not None, "the runner imported without its bundled runner_kit"
    assert "runners build" in out["import_error"]


def test_cli_build_one_plugin(tmp_path: Path) -> None:
    info = PLUGINS[0]
    proc = subprocess.run(
        [sys.executable, "-m", "runners_cli", "build", info.dirname, "--out", str(tmp_path / "out"),
         "--stage", str(tmp_path / "stage")],
        capture_output=True, text=True, timeout=60, cwd=str(ROOT),
    )
    assert proc.returncode == 0, proc.stderr
    printed = Path(proc.stdout.strip().splitlines()[-1])
    assert printed == (tmp_path / "out" / info.package_name).resolve()
    assert printed.is_file()
    assert (tmp_path / "stage" / info.dirname / "runner_kit" / "__init__.py").is_file()


def test_build_skips_local_junk(tmp_path: Path) -> None:
    info = PLUGINS[0]
    copy = tmp_path / "src" / info.dirname
    shutil.copytree(info.directory, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / ".env").write_text("PLUGIN_DEBUG_KEY=secret\n")
    (copy / "__pycache__").mkdir()
    (copy / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    (copy / "dist").mkdir()
    (copy / "dist" / "old.lbpkg").write_bytes(b"PK")
    stage = tmp_path / "stage"
    (stage / info.dirname / "leftover").mkdir(parents=True)
    path = build_plugin(load_plugin(copy), tmp_path / "out", stage_root=stage)
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
    assert not any(n == ".env" or "__pycache__" in n or n.startswith(("dist/", "leftover")) for n in names), names


# --- validation failures name the plugin and say what is wrong --------------------------------


def _mutated(tmp_path: Path, info: PluginInfo, edit_runner=None, edit_manifest=None, requirements=None) -> PluginInfo:
    copy = tmp_path / info.dirname
    shutil.copytree(info.directory, copy, ignore=shutil.ignore_patterns("__pycache__"))
    runner_yaml = copy / info.runner_yaml.relative_to(info.directory)
    if edit_runner:
        doc = yaml.safe_load(runner_yaml.read_text(encoding="utf-8"))
        edit_runner(doc)
        runner_yaml.write_text(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False), encoding="utf-8")
    if edit_manifest:
        doc = yaml.safe_load((copy / "manifest.yaml").read_text(encoding="utf-8"))
        edit_manifest(doc)
        (copy / "manifest.yaml").write_text(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False), encoding="utf-8")
    if requirements is not None:
        (copy / "requirements.txt").write_text(requirements, encoding="utf-8")
    return load_plugin(copy)


def _set_capability(doc):
    doc["spec"]["capabilities"]["telepathy"] = True


def _bad_permission(doc):
    doc["spec"]["permissions"]["tools"] = ["execute"]


def _no_usages(doc):
    doc["spec"].pop("usages")


def _runner_name(doc):
    doc["metadata"]["name"] = "main"


def _label_en_only(doc):
    doc["spec"]["config"][0]["label"] = {"en_US": "Only English"}


def _no_type(doc):
    doc["spec"]["config"][0].pop("type")


def _author(doc):
    doc["metadata"]["author"] = "someone-else"


def _old_version(doc):
    doc["metadata"]["version"] = "0.2.9"


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"edit_runner": _set_capability}, "telepathy"),
        ({"edit_runner": _bad_permission}, "permissions.tools"),
        ({"edit_runner": _no_usages}, "usages"),
        ({"edit_runner": _runner_name}, "no runner named 'default'"),
        ({"edit_runner": _label_en_only}, "zh_Hans"),
        ({"edit_runner": _no_type}, "missing type"),
        ({"edit_manifest": _author}, "langbot-team"),
        ({"edit_manifest": _old_version}, "below 0.3.0"),
        ({"requirements": "httpx>=0.27\n-e ./local\n"}, "pip options"),
        ({"requirements": "httpx @ https://example.invalid/httpx.whl\n"}, "URL"),
        ({"requirements": "httpx >>> 1\n"}, "PEP 508"),
    ],
    ids=["capability", "permission", "usages", "runner-name", "label", "type", "author", "version",
         "req-option", "req-url", "req-syntax"],
)
def test_invalid_plugin_fails_the_build(tmp_path: Path, kwargs: dict[str, Any], expected: str) -> None:
    info = _mutated(tmp_path / "src", PLUGINS[0], **kwargs)
    with pytest.raises(BuildError) as caught:
        build_plugin(info, tmp_path / "out", stage_root=tmp_path / "stage")
    assert caught.value.plugin == info.name
    report = caught.value.report()
    assert info.name in report and expected in report, report
    assert not list((tmp_path / "out").glob("*.lbpkg")) if (tmp_path / "out").exists() else True


def test_missing_chinese_readme_fails_the_build(tmp_path: Path) -> None:
    info = _mutated(tmp_path / "src", PLUGINS[0])
    (info.directory / "readme" / "README_zh_Hans.md").unlink()
    with pytest.raises(BuildError) as caught:
        build_plugin(info, tmp_path / "out", stage_root=tmp_path / "stage")
    assert "readme/README_zh_Hans.md is missing" in caught.value.report()


def test_readme_left_out_of_the_package_fails_the_build(tmp_path: Path) -> None:
    # a plugin-level .gitignore steers what the SDK zips; the package must still hold both pages
    info = _mutated(tmp_path / "src", PLUGINS[0])
    (info.directory / ".gitignore").write_text("readme/\n", encoding="utf-8")
    with pytest.raises(BuildError) as caught:
        build_plugin(info, tmp_path / "out", stage_root=tmp_path / "stage")
    assert "package lacks readme/README_zh_Hans.md" in caught.value.report()
    assert not list((tmp_path / "out").glob("*.lbpkg"))


def test_cli_build_reports_failure(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "runners_cli", "build", "no-such-plugin", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=60, cwd=str(ROOT),
    )
    assert proc.returncode != 0
    assert "no-such-plugin" in proc.stderr


@pytest.mark.parametrize("info", PLUGINS, ids=IDS)
def test_source_plugin_validates(info: PluginInfo) -> None:
    assert validate_plugin(info.directory).problems == []
