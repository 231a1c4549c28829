"""Each host holds the cluster CA's certificate and exactly its own certificates and keys from the spec (ctl1 its
controller's, gpu1 its agent's), keys private, each chaining to the CA with the CN and roles the controllers
authorise; after the side effect's renewal every certificate is a new one (new serial, new key) from the same CA."""

import pytest

testinfra_hosts = ["podman://hao-pki-ctl1", "podman://hao-pki-gpu1"]

PKI = "/etc/ha-ops/pki"
OWN = {"hao-pki-ctl1": ("controller-ctl1", "ctl1", "ha-ops:controllers"),
       "hao-pki-gpu1": ("agent-gpu1", "gpu1", "ha-ops:agents")}  # fmt: skip


@pytest.fixture
def own(host):
    return OWN[host.backend.get_hostname()]


def test_each_host_holds_only_its_own_identity(host, own):
    name = own[0]
    issuer = ["issuer.crt", "issuer.key"] if name.startswith("controller") else []  # (ha_ops_pki_issuer)
    assert sorted(host.file(PKI).listdir()) == sorted(["ca.crt", f"{name}.crt", f"{name}.key", *issuer])
    key = host.file(f"{PKI}/{name}.key")
    assert (key.user, key.group, key.mode) == ("root", "root", 0o600)
    assert host.file(f"{PKI}/{name}.crt").mode == 0o644


def test_the_certificate_chains_to_the_ca_and_names_its_holder_and_role(host, own):
    name, cn, role = own
    host.run_test("openssl verify -CAfile %s/ca.crt %s/%s.crt", PKI, PKI, name)
    subject = host.check_output("openssl x509 -in %s/%s.crt -noout -subject -nameopt RFC2253", PKI, name)
    assert subject == f"subject=CN={cn},O={role}"
    # The key is the certificate's.
    cert_key = host.check_output("openssl x509 -in %s/%s.crt -noout -pubkey", PKI, name)
    assert cert_key == host.check_output("openssl pkey -in %s/%s.key -pubout", PKI, name)


def test_the_controller_serves_at_its_name_and_address_and_the_agent_is_a_client_only(host, own):
    text = host.check_output("openssl x509 -in %s/%s.crt -noout -text", PKI, own[0])
    if own[0].startswith("controller"):
        assert "DNS:ctl1" in text and "IP Address:10." in text
        assert "TLS Web Server Authentication" in text
    else:
        assert "Subject Alternative Name" not in text and "TLS Web Server Authentication" not in text
    assert "TLS Web Client Authentication" in text


def test_the_renewal_issued_new_certificates_from_the_same_ca(host, own):
    before = dict(line.split(" ", 1) for line in host.file("/root/serials-before").content_string.splitlines())
    name = own[0]
    now = host.check_output("openssl x509 -in %s/%s.crt -noout -serial", PKI, name)
    assert before[f"{name}.crt"] != now
    assert before["ca.crt"] == host.check_output("openssl x509 -in %s/ca.crt -noout -serial", PKI)
    host.run_test("openssl verify -CAfile %s/ca.crt %s/%s.crt", PKI, PKI, name)


def test_the_controller_holds_the_issuing_ca_which_signs_leaf_certificates_only(host, own):
    if not own[0].startswith("controller"):
        assert not host.file(f"{PKI}/issuer.key").exists  # a GPU node never holds it
        return
    key = host.file(f"{PKI}/issuer.key")
    assert (key.user, key.group, key.mode) == ("root", "root", 0o600)
    host.run_test("openssl verify -CAfile %s/ca.crt %s/issuer.crt", PKI, PKI)
    text = host.check_output("openssl x509 -in %s/issuer.crt -noout -text", PKI)
    assert "CA:TRUE, pathlen:0" in text
    # Made once: the renewal (side effect) kept it.
    before = dict(line.split(" ", 1) for line in host.file("/root/serials-before").content_string.splitlines())
    assert before["issuer.crt"] == host.check_output("openssl x509 -in %s/issuer.crt -noout -serial", PKI)

