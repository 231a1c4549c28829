"""After side_effect.yml rotated the munge key under a running batch job: every host holds the same new key (the
old one kept as munge.key.prev), the job still runs and still counts, and new jobs run. The failover tests may run
first: the backup then serves these, on the new key too."""

import time

testinfra_hosts = ["podman://hao-slurm-node1"]

HOSTS = ["hao-slurm-ctl1", "hao-slurm-ctl2", "hao-slurm-node1"]


def key_digest(host, path="/etc/munge/munge.key"):
    return host.check_output(f"sha256sum {path}").split()[0]


def test_every_host_holds_the_same_new_key(host):
    before = host.file("/root/munge-key-before.sha256").content_string.strip()
    digests = {name: key_digest(host.get_host(f"podman://{name}")) for name in HOSTS}
    assert len(set(digests.values())) == 1, digests
    assert before not in digests.values()
    for name in HOSTS:
        other = host.get_host(f"podman://{name}")
        assert key_digest(other, "/etc/munge/munge.key.prev") == before
        key = other.file("/etc/munge/munge.key")
        assert (key.user, key.group, key.mode) == ("munge", "munge", 0o400)
        assert not other.file("/etc/munge/munge.key.next").exists
    # The role's own copy on the primary follows, so a later site.yml run keeps the new key.
    primary = host.get_host("podman://hao-slurm-ctl1")
    assert key_digest(primary, "/etc/munge/ha-ops-munge.key") == digests["hao-slurm-ctl1"]


def test_a_credential_from_one_host_decodes_on_every_other(host):
    for source in HOSTS:
        credential = host.get_host(f"podman://{source}").check_output("munge -n")
        for name in HOSTS:
            assert host.get_host(f"podman://{name}").run(f"echo '{credential}' | unmunge").rc == 0, (source, name)


def test_the_job_started_before_the_rotation_still_runs_and_counts(host):
    job = host.file("/root/munge-rotate-job.id").content_string.strip()
    assert host.check_output(f"squeue -h -j {job} -o %T") == "RUNNING"
    first = int(host.check_output("tail -n1 /root/munge-rotate-job.out"))
    time.sleep(3)
    assert int(host.check_output("tail -n1 /root/munge-rotate-job.out")) > first
    # One process counted through the rotation: no number lost or repeated.
    lines = host.check_output("cat /root/munge-rotate-job.out").split()
    assert lines == [str(i) for i in range(1, len(lines) + 1)]
    host.run_test(f"scancel {job}")


def test_the_partition_is_up_and_a_new_job_runs(host):
    assert host.check_output("sinfo -h -o %a").split() == ["up"]
    out = host.check_output("timeout 60 srun -N1 hostname")
    assert out.strip().splitlines()[-1] == "hao-slurm-node1"
