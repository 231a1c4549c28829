"""One model of the audit collector's rsyslog config, two renderers: ha_ops.remediation.audit_collector (the lab's
sink) and the ha_ops_audit_sink role's Jinja template write the same text for the same values, with jinja2 as
Ansible's template module sets it up and through Ansible itself; values rsyslog's config cannot hold are refused;
the lab's config is the text it was before the renderer moved; and rsyslogd's own check accepts the role's."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml

from ha_ops.lab import audit_sink
from ha_ops.lab.context import LabContext
from ha_ops.lab.paths import LabPaths
from ha_ops.remediation.audit_collector import PORT, render_rsyslog_config
from ha_ops.security.pki import CertificateAuthority
from ha_ops.spec import compute_layout, load_spec

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "ha_ops_audit_sink"
TEMPLATE = ROLE / "templates" / "audit-sink.conf.j2"
MANAGED = "Ansible managed"
# The role's header: ansible_managed, then what writes the same text.
ROLE_HEADER = (
    f"{MANAGED}\nThe ha-ops audit sink: the same text as ha_ops.remediation.audit_collector.render_rsyslog_config."
)

CASES = [
    # the role's defaults (every address) with the lab's two controllers
    {"permitted_peers": ["ctl1", "ctl2"]},
    # one address, another port, the Kubernetes layer's Service beside the hosts, other folders
    {
        "address": "10.77.0.11",
        "port": 10514,
        "permitted_peers": ["ctl1", "ctl2", "ha-ops-controller.ha-ops.svc"],
        "ca_file": "/srv/pki/ca.pem",
        "cert_file": "/srv/pki/sink.pem",
        "key_file": "/srv/pki/sink-key.pem",
        "output_file": "/data/audit/ha-ops audit.jsonl",
        "work_dir": "/var/spool/sink",
    },
    {"permitted_peers": ["*.controllers.example.org"], "address": "sink.example.org"},
]


def role_defaults() -> dict:
    return yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())


def python_values(case: dict) -> dict:
    """The case with the role's defaults for what it leaves out, as the Python renderer's arguments."""
    d = role_defaults()
    return {
        "work_dir": d["ha_ops_audit_sink_work_dir"],
        "ca_file": d["ha_ops_audit_sink_ca_file"],
        "cert_file": d["ha_ops_audit_sink_cert_file"],
        "key_file": d["ha_ops_audit_sink_key_file"],
        "output_file": d["ha_ops_audit_sink_output_file"],
        "address": d["ha_ops_audit_sink_listen_address"],
        "port": d["ha_ops_audit_sink_port"],
    } | case


def role_vars(values: dict) -> dict:
    return {f"ha_ops_audit_sink_{'listen_address' if k == 'address' else k}": v for k, v in values.items()}


def render_template(values: dict) -> str:
    """The role's template with jinja2 set up as Ansible's template module sets it (trim_blocks, the trailing newline
    kept), every variable required."""
    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined,
                             autoescape=False)  # fmt: skip
    return env.from_string(TEMPLATE.read_text()).render(ansible_managed=MANAGED, **role_vars(values))


@pytest.mark.parametrize("case", CASES, ids=range(len(CASES)))
def test_the_roles_template_and_the_python_renderer_write_the_same_config(case: dict) -> None:
    values = python_values(case)
    assert render_template(values) == render_rsyslog_config(header=ROLE_HEADER, **values)


def test_the_defaults_are_the_role_documented_ones() -> None:
    d = role_defaults()
    assert d["ha_ops_audit_sink_port"] == PORT
    assert d["ha_ops_audit_sink_cert_file"] == "/etc/ha-ops/pki/audit-sink.crt"  # ha_ops_pki's audit-sink identity
    assert d["ha_ops_audit_sink_output_file"] == "/var/log/ha-ops/audit.jsonl"


def test_through_ansible_too(tmp_path: Path) -> None:
    """The template module itself (not only jinja2 set up like it) writes the Python renderer's text."""
    values = python_values(CASES[1])
    out = tmp_path / "audit-sink.conf"
    (tmp_path / "render.yml").write_text(yaml.safe_dump([{
        "name": "render", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "vars": role_vars(values) | {"ansible_python_interpreter": str(REPO / ".venv" / "bin" / "python")},
        "tasks": [{"ansible.builtin.template": {"src": str(TEMPLATE), "dest": str(out)}}],
    }]))  # fmt: skip
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false")  # fmt: skip
    argv = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", "localhost,", str(tmp_path / "render.yml")]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert out.read_text() == render_rsyslog_config(header=ROLE_HEADER, **values)


@pytest.mark.parametrize("field", ["work_dir", "ca_file", "cert_file", "key_file", "output_file", "address"])
@pytest.mark.parametrize("bad", ['a"b', "a\\b", "a\nb", "a\rb"], ids=["quote", "backslash", "newline", "return"])
def test_values_rsyslogs_config_cannot_hold_are_refused(field: str, bad: str) -> None:
    values = python_values({"permitted_peers": ["ctl1"]}) | {field: f"/x/{bad}"}
    with pytest.raises(ValueError, match="not a value rsyslog's config can hold"):
        render_rsyslog_config(header="h", **values)


@pytest.mark.parametrize("bad", ['ctl"1', "ctl\\1", "ctl\n1"])
def test_a_peer_name_rsyslog_cannot_hold_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not a value rsyslog's config can hold"):
        render_rsyslog_config(header="h", **python_values({"permitted_peers": ["ctl2", bad]}))


def test_no_peer_and_no_port_are_refused() -> None:
    with pytest.raises(ValueError, match="no permitted peer"):
        render_rsyslog_config(header="h", **python_values({"permitted_peers": []}))
    with pytest.raises(ValueError, match="not a port"):
        render_rsyslog_config(header="h", **python_values({"permitted_peers": ["ctl1"], "port": 0}))


LAB_CONFIG = """\
# The lab's audit sink (ha_ops.lab.audit_sink): written by ha-ops lab up.
global(
  workDirectory="{root}/nodes/mon1/rsyslog"
  maxMessageSize="64k"
  defaultNetstreamDriver="gtls"
  defaultNetstreamDriverCAFile="{root}/pki/ca.crt"
  defaultNetstreamDriverCertFile="{root}/pki/audit-sink.crt"
  defaultNetstreamDriverKeyFile="{root}/pki/audit-sink.key"
)
module(load="imtcp" streamDriver.name="gtls" streamDriver.mode="1" streamDriver.authMode="x509/name"
       permittedPeer=["ctl1", "ctl2"])
input(type="imtcp" address="{address}" port="6514" ruleset="audit")
template(name="entry" type="string" string="%msg%\\n")
ruleset(name="audit") {{
  if $app-name == "ha-ops-audit" then {{
    action(type="omfile" file="{root}/nodes/mon1/audit-sink/audit.jsonl" template="entry" flushOnTXEnd="on" \
asyncWriting="off")
  }}
}}
"""


def test_the_labs_config_is_what_it_was(tmp_path: Path) -> None:
    """The lab renders through the shared renderer, to the very text it wrote before."""
    spec = load_spec(REPO / "examples" / "lab.yaml")
    ctx = LabContext(spec, compute_layout(spec), LabPaths(tmp_path / "lab"))
    expected = LAB_CONFIG.format(root=tmp_path / "lab", address=ctx.layout.node("mon1").address)
    assert audit_sink.render_config(ctx) == expected


def test_rsyslog_accepts_the_roles_config(tmp_path: Path) -> None:
    """rsyslogd's own level-1 check (the role's `validate`) accepts what the template writes, with real files.
    (rsyslog is one of `make setup`'s packages: the lab's sink runs it.)"""
    ca = CertificateAuthority(tmp_path / "pki")
    ca.ensure("test CA")
    sink = ca.issue("audit-sink", "mon1", groups=("ha-ops:audit-sink",), server_names=("mon1",))
    (tmp_path / "work").mkdir()
    values = python_values({"permitted_peers": ["ctl1", "ctl2"]}) | {
        "ca_file": str(ca.paths.cert), "cert_file": str(sink.cert), "key_file": str(sink.key),
        "work_dir": str(tmp_path / "work"), "output_file": str(tmp_path / "out" / "audit.jsonl"),
    }  # fmt: skip
    config = tmp_path / "audit-sink.conf"
    config.write_text(render_template(values))
    out = subprocess.run(["/usr/sbin/rsyslogd", "-N1", "-f", str(config)], capture_output=True, text=True,
                         timeout=30)  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
