"""Name resolution inside the sandbox on hosts whose /etc files link elsewhere (systemd-resolved's
``/etc/resolv.conf -> /run/systemd/resolve/stub-resolv.conf``): the link's target is bound
read-only (its folder, since a resolver renames a new file into it), never a home or the data root."""

from __future__ import annotations

import os
from pathlib import Path

from runner_kit import sandbox


def _link(etc: Path, name: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("nameserver 127.0.0.53\n")
    os.symlink(target, etc / name)


def test_a_resolver_link_out_of_etc_brings_its_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNNER_KIT_DATA_DIR", str(tmp_path / "data"))
    etc = tmp_path / "etc"
    etc.mkdir()
    resolve = tmp_path / "run" / "systemd" / "resolve"
    _link(etc, "resolv.conf", resolve / "stub-resolv.conf")
    _link(etc, "hosts", tmp_path / "data" / "agent" / "homes" / "h" / "hosts")  # never the data root
    (etc / "nsswitch.conf").write_text("hosts: files dns\n")  # a plain file: /etc shows it already
    os.symlink(tmp_path / "gone", etc / "gai.conf")  # dangling: nothing to bind
    assert sandbox._etc_link_targets(str(etc)) == [resolve]


def test_this_hosts_resolver_files_are_readable_inside():
    for target in sandbox._etc_link_targets():
        assert target.exists() and not sandbox._system(target)
    args = sandbox.bwrap_args(sandbox.Boundary(bwrap="bwrap", workspace=Path("/tmp/ws"), home=Path("/tmp/h")))
    for target in sandbox._etc_link_targets():
        assert ["--ro-bind", str(target), str(target)] == args[args.index(str(target)) - 1:][:3]
