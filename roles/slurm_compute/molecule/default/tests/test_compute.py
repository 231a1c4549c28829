"""A GPU node: its gres, GPU scheduling and the health check Slurm runs."""

import time

testinfra_hosts = ["podman://hao-slurm-compute"]


def test_slurmd_registers_the_declared_gpus(host):
    deadline = time.time() + 60
    while "idle" not in host.run("sinfo -h -N -o '%t'").stdout and time.time() < deadline:
        time.sleep(1)
    node = host.check_output("scontrol show node hao-slurm-compute")
    assert "Gres=gpu:h200:4" in node
    assert "State=IDLE" in node
    gres = host.file("/etc/slurm/gres.conf").content_string
    assert "AutoDetect=off" in gres and "File=/dev/nvidia[0-3]" in gres


def test_jobs_are_given_distinct_gpus(host):
    out = host.check_output("timeout 60 srun -N1 --gres=gpu:h200:3 sh -c 'echo $CUDA_VISIBLE_DEVICES'")
    assert out.strip() == "0,1,2"
    refused = host.run("timeout 30 srun -N1 --immediate=5 --gres=gpu:5 true")
    assert refused.rc != 0


def test_slurm_runs_the_ha_ops_health_check(host):
    conf = host.check_output("scontrol show config")
    assert "HealthCheckProgram      = /usr/local/sbin/ha-ops-slurm-health-check" in conf
    script = host.file("/usr/local/sbin/ha-ops-slurm-health-check")
    assert script.mode == 0o755
    assert "health check --drain" in script.content_string
    # ha-ops is not installed in this container (ha_ops_agent's scenario covers it): the wrapper says so and
    # leaves the node alone.
    result = host.run("/usr/local/sbin/ha-ops-slurm-health-check")
    assert result.rc == 0 and "is not installed" in result.stderr


def test_the_munge_key_is_private(host):
    key = host.file("/etc/munge/munge.key")
    assert key.user == "munge" and key.mode == 0o400
