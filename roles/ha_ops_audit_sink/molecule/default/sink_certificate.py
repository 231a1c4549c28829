"""Issues the audit sink's certificate (again, with a new key) from the scenario's CA for mon1 at the container's
address: examples/lab.yaml places mon1 at 10.77.0.11, podman the container elsewhere, and the controllers verify
the sink by the address they ship to. The identity is the one `ha-ops pki issue` gives (ha_ops.security.pki), on the
layout with mon1 at that address, as `ha-ops inventory` takes addresses a cloud picked (with_addresses).
Usage: sink_certificate.py SPEC CA_DIR ADDRESS"""

import datetime as dt
import sys
from ipaddress import IPv4Address
from pathlib import Path

from ha_ops.security import pki
from ha_ops.spec import compute_layout, load_spec
from ha_ops.spec.inventory import with_addresses

spec_file, ca_dir, address = sys.argv[1:4]
spec = load_spec(Path(spec_file))
layout = with_addresses(compute_layout(spec), {spec.monitoring.host.name: IPv4Address(address)})
sink = pki.identities(spec, layout)["audit-sink"]
pki.CertificateAuthority(Path(ca_dir)).issue("audit-sink", sink.common_name, groups=sink.roles,
                                             server_names=sink.server_names, validity=dt.timedelta(hours=24),
                                             renew=True)
print(f"audit-sink: CN={sink.common_name}, serving at {', '.join(sink.server_names)}")
