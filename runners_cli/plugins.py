"""The plugins in this repository: discovery from their manifests, and loading a plugin's runner
class the way the LangBot plugin runtime does (plugin directory on sys.path during the import)."""

from __future__ import annotations

import copy
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: ~10x faster
_parsed: dict[Path, tuple[bytes, Any]] = {}


def _read_yaml(path: Path) -> Any:
    """A YAML file's document, parsed once per content of the file (read each time: an edit that
    keeps the size and modification time, within the file system's clock tick or put back with
    ``cp -p``, is still seen by a long-lived ``runners chat``); callers get their own copy.
    Discovery runs for every test and every CLI command, and parsing the thirteen runner
    manifests each time was most of the test suite's time."""
    raw = path.read_bytes()
    hit = _parsed.get(path)
    if hit is None or hit[0] != raw:
        hit = (raw, yaml.load(raw.decode("utf-8"), Loader=_Loader))  # noqa: S506 - safe loader
        _parsed[path] = hit
    return copy.deepcopy(hit[1])


@dataclass(frozen=True)
class PluginInfo:
    """One plugin directory and what its manifests declare."""

    directory: Path
    author: str
    name: str
    version: str
    runner_yaml: Path
    runner_manifest: dict[str, Any]

    @property
    def dirname(self) -> str:
        return self.directory.name

    @property
    def runner_id(self) -> str:
        return f"plugin:{self.author}/{self.name}/{self.runner_manifest['metadata']['name']}"

    @property
    def capabilities(self) -> dict[str, bool]:
        return dict(self.runner_manifest.get("spec", {}).get("capabilities") or {})

    @property
    def config_items(self) -> list[dict[str, Any]]:
        return list(self.runner_manifest.get("spec", {}).get("config") or [])

    @property
    def package_name(self) -> str:
        return f"{self.author}-{self.name}-{self.version}.lbpkg"


def load_plugin(directory: Path) -> PluginInfo:
    manifest = _read_yaml(directory / "manifest.yaml")
    meta = manifest["metadata"]
    runner_dirs = manifest["spec"]["components"]["Runner"]["fromDirs"]
    runner_yaml = directory / runner_dirs[0]["path"] / "default.yaml"
    return PluginInfo(
        directory=directory,
        author=meta["author"],
        name=meta["name"],
        version=str(meta["version"]),
        runner_yaml=runner_yaml,
        runner_manifest=_read_yaml(runner_yaml),
    )


def discover(root: Path = ROOT) -> list[PluginInfo]:
    """Every top-level directory with a plugin manifest that declares a Runner."""
    found = []
    for child in sorted(root.iterdir()):
        mf = child / "manifest.yaml"
        if child.is_dir() and mf.is_file():
            doc = _read_yaml(mf) or {}
            if doc.get("kind") == "Plugin" and "Runner" in (doc.get("spec", {}).get("components") or {}):
                found.append(load_plugin(child))
    return found


def find(name: str, root: Path = ROOT) -> PluginInfo:
    """A plugin by directory name (dify-agent) or plugin name (DifyAgent)."""
    for p in discover(root):
        if name in (p.dirname, p.name):
            return p
    raise KeyError(f"no plugin named {name!r}; try `runners list`")


def load_runner_class(info: PluginInfo) -> type:
    """Import the plugin's runner class under a unique module name, plugin dir on sys.path."""
    execution = info.runner_manifest["execution"]["python"]
    path = (info.runner_yaml.parent / execution["path"]).resolve()
    module_name = f"_lbr_{info.name}_{path.stem}"
    module = sys.modules.get(module_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(module_name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(info.directory))
        try:
            sys.modules[module_name] = module
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(module_name, None)
            raise
        finally:
            sys.path.remove(str(info.directory))
    return getattr(module, execution["attr"])
