"""Two controllers and one GPU node: a job runs, the primary slurmctld is killed, the backup takes over and a new
job runs."""

import time

testinfra_hosts = ["podman://hao-slurm-node1"]


def wait_for(host, command, expect, timeout=60):
    deadline = time.time() + timeout
    out = ""
    while time.time() < deadline:
        result = host.run(command)
        out = result.stdout + result.stderr
        if result.rc == 0 and expect in out:
            return out
        time.sleep(1)
    raise AssertionError(f"{command!r} did not show {expect!r} within {timeout} s; last: {out}")


def test_both_controllers_answer_with_the_first_as_primary(host):
    out = wait_for(host, "scontrol ping", "Slurmctld(backup) at hao-slurm-ctl2 is UP")
    assert "Slurmctld(primary) at hao-slurm-ctl1 is UP" in out


def test_the_node_registers_its_gpus_and_a_job_gets_two(host):
    # Idle, or mixed: the side effect's counting job (no GPUs) runs through the munge rotation beside this one.
    wait_for(host, "sinfo -h -N -o '%N %t' | sed 's/ mix$/ idle/'", "hao-slurm-node1 idle")
    assert "Gres=gpu:h100:8" in host.check_output("scontrol show node hao-slurm-node1")
    out = host.check_output("timeout 60 srun -N1 --gres=gpu:2 sh -c 'echo $CUDA_VISIBLE_DEVICES; hostname'")
    assert out.split() == ["0,1", "hao-slurm-node1"]


def test_the_backup_takes_over_when_the_primary_is_killed_and_new_jobs_run(host):
    # Only the side effect's counting job may be left, and saved as the only one: a job that ended less than 5 s
    # before the kill is still running in the state the primary last saved, and the backup then holds its CPUs
    # until the node registers again (ci16: the new job waited for resources on a 2-CPU node).
    counting = host.file("/root/munge-rotate-job.id").content_string.strip()
    wait_for(host, f"test \"$(squeue -h -o %i)\" = {counting} && echo only-the-counting-job", "only-the-counting-job")
    time.sleep(6)  # slurmctld saves job_state at most once per SAVE_MAX_WAIT (5 s, src/slurmctld/state_save.c)
    primary = host.get_host("podman://hao-slurm-ctl1")
    primary.run_test("systemctl kill --signal=KILL slurmctld")
    wait_for(host, "scontrol ping", "Slurmctld(primary) at hao-slurm-ctl1 is DOWN")
    backup = host.get_host("podman://hao-slurm-ctl2")
    wait_for(backup, "grep -c 'Running as primary controller' /var/log/slurm/slurmctld.log", "1", timeout=60)
    try:
        out = wait_for(host, "timeout 30 srun -N1 hostname", "hao-slurm-node1", timeout=120)
    except AssertionError as error:
        queue = host.run("squeue -o '%i %j %T %r'; sinfo -N -o '%N %t %C'")
        raise AssertionError(f"{error}\n{queue.stdout}{queue.stderr}") from None
    assert out.strip().splitlines()[-1] == "hao-slurm-node1"


def test_the_controllers_share_one_state_folder(host):
    ctl1 = host.get_host("podman://hao-slurm-ctl1")
    ctl2 = host.get_host("podman://hao-slurm-ctl2")
    assert ctl1.file("/srv/slurm/state/.ha-ops-shared-check").content_string == \
        ctl2.file("/srv/slurm/state/.ha-ops-shared-check").content_string
    assert ctl2.file("/srv/slurm/state/job_state").exists
    assert ctl1.file("/srv/slurm/state").user == "slurm"
