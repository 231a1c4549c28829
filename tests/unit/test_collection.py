"""The roles and playbooks as the Ansible collection ha_ops.ha_ops (galaxy.yml): it builds and installs offline, holds
every role and playbook and nothing else of the checkout, and its roles and playbooks resolve from the installed
collection alone (no roles path into the checkout)."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
GALAXY = REPO / ".venv" / "bin" / "ansible-galaxy"


def run(argv: list[str], env: dict[str, str] | None = None, cwd: Path = REPO) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=cwd, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done


def test_the_collection_builds_installs_offline_and_holds_the_roles_and_playbooks(tmp_path: Path) -> None:
    version = yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]
    run([str(GALAXY), "collection", "build", "--output-path", str(tmp_path / "dist"), str(REPO)])
    archive = tmp_path / "dist" / f"ha_ops-ha_ops-{version}.tar.gz"
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"FILES.json", "MANIFEST.json", "roles", "playbooks"}, tops
    roles = sorted(p.name for p in (REPO / "roles").iterdir() if p.is_dir())
    assert {n.split("/")[1] for n in names if n.startswith("roles/") and n.count("/") >= 2} == set(roles)
    assert not [n for n in names if "/molecule" in n or n.endswith(".pyc")]

    # Offline: --no-deps (ansible.posix, its one dependency, comes with the ansible package).
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_ROLES_PATH=str(tmp_path / "no-roles"),
               ANSIBLE_COLLECTIONS_PATH=str(tmp_path / "collections"))  # fmt: skip
    run([str(GALAXY), "collection", "install", "--no-deps", "-p", str(tmp_path / "collections"), str(archive)], env)
    home = tmp_path / "collections" / "ansible_collections" / "ha_ops" / "ha_ops"
    manifest = json.loads((home / "MANIFEST.json").read_text())["collection_info"]
    assert (manifest["namespace"], manifest["name"], manifest["version"]) == ("ha_ops", "ha_ops", version)
    assert sorted(p.name for p in (home / "roles").iterdir() if p.is_dir()) == roles

    # A role's documented inputs, and a playbook that includes roles by their short names, from the collection.
    doc = run([str(REPO / ".venv" / "bin" / "ansible-doc"), "-t", "role", "--json", "ha_ops.ha_ops.ha_ops_controller"],
              env)  # fmt: skip
    options = json.loads(doc.stdout)["ha_ops.ha_ops.ha_ops_controller"]["entry_points"]["main"]["options"]
    assert "ha_ops_controller_state_dir" in options
    inventory = tmp_path / "hosts.yml"
    groups = {"gpu_nodes": {"hosts": {"gpu1": None}}, "remediation_controllers": {"hosts": {"ctl1": None}}}
    inventory.write_text(yaml.safe_dump({"all": {"children": groups}}))
    for playbook in ("ha_ops.ha_ops.site", "ha_ops.ha_ops.services"):
        checked = run([str(REPO / ".venv" / "bin" / "ansible-playbook"), "--syntax-check", "-i", str(inventory),
                       playbook], env, cwd=tmp_path)  # fmt: skip
        assert str(home / "playbooks") in checked.stdout
