"""The collector's side of the shipped audit trail (ha_ops.remediation.audit_sink): rsyslog's config for receiving
the controllers' entries as syslog over TLS (RFC 5425, GnuTLS, `x509/name`: only the permitted peers' certificates
may ship) and appending each entry's line to one file. Pure: plain values in, the config's text out.

One model for both collectors that ha-ops sets up: the lab's (ha_ops.lab.audit_sink) and a site's, the
ha_ops_audit_sink role, whose template `roles/ha_ops_audit_sink/templates/audit-sink.conf.j2` writes the same text
for the same values (tests/unit/test_audit_collector.py renders both and compares them)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ha_ops.remediation.audit_sink import APP

PORT = 6514  # syslog over TLS


def quoted(value: object) -> str:
    """A value as an rsyslog config string; refused where rsyslog's config cannot hold it (no escape is read the
    same everywhere: a quote, a backslash or a line break)."""
    text = str(value)
    if '"' in text or "\\" in text or "\n" in text or "\r" in text:
        raise ValueError(f"not a value rsyslog's config can hold: {text!r}")
    return f'"{text}"'


def render_rsyslog_config(
    *,
    header: str,
    work_dir: str | Path,
    ca_file: str | Path,
    cert_file: str | Path,
    key_file: str | Path,
    permitted_peers: Sequence[str],
    output_file: str | Path,
    address: str | None = None,
    port: int = PORT,
) -> str:
    """A whole rsyslogd config (its own instance: `rsyslogd -f FILE`), each line of `header` as a comment first.
    `address` None or empty: every address. `permitted_peers`: the names (a certificate's DNS names or its CN)
    that may ship; at least one."""
    if not permitted_peers:
        raise ValueError("no permitted peer: nobody could ship")
    if not 1 <= port <= 65535:
        raise ValueError(f"not a port: {port}")
    comment = "".join(f"# {line}\n" for line in header.splitlines())
    peers = ", ".join(quoted(name) for name in permitted_peers)
    listen = f" address={quoted(address)}" if address else ""
    return f"""{comment}global(
  workDirectory={quoted(work_dir)}
  maxMessageSize="64k"
  defaultNetstreamDriver="gtls"
  defaultNetstreamDriverCAFile={quoted(ca_file)}
  defaultNetstreamDriverCertFile={quoted(cert_file)}
  defaultNetstreamDriverKeyFile={quoted(key_file)}
)
module(load="imtcp" streamDriver.name="gtls" streamDriver.mode="1" streamDriver.authMode="x509/name"
       permittedPeer=[{peers}])
input(type="imtcp"{listen} port="{port}" ruleset="audit")
template(name="entry" type="string" string="%msg%\\n")
ruleset(name="audit") {{
  if $app-name == "{APP}" then {{
    action(type="omfile" file={quoted(output_file)} template="entry" flushOnTXEnd="on" asyncWriting="off")
  }}
}}
"""
