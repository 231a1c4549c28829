"""The etcd backup as the role leaves it: a timer, snapshots with checksums here and on the second container,
retention, a restore after the data dir is wiped that brings the keys back, and a corrupted snapshot refused.
The tests run in file order: each builds on the state the one before it left."""

import testinfra

testinfra_hosts = ["podman://hao-etcd-backup-1"]

BACKUPS = "/var/backups/etcd"
REMOTE = "/srv/etcd-backups/hao-etcd-backup-1"
DATA = "/var/lib/etcd/default"
KEEP = 3
KEYS = {"/ha-ops/cluster": "prod-a", "/ha-ops/nodes/gpu1": "healthy", "/ha-ops/nodes/gpu2": "drained"}

target = testinfra.get_host("podman://hao-etcd-backup-2")


def get(host, key):
    return host.check_output("etcdctl get --print-value-only %s", key)


def snapshots(h, folder):
    return sorted(host_ls(h, folder, "*.db")), sorted(host_ls(h, folder, "*.db.sha256"))


def host_ls(h, folder, pattern):
    out = h.run(f"cd {folder} && ls -1 {pattern}")
    return [line for line in out.stdout.split() if line]


def back_up(host):
    """One run of the service, as the timer would start it (a oneshot: start returns when it is done)."""
    host.run_test("systemctl start ha-ops-etcd-backup.service")
    assert host.check_output("systemctl show -p Result --value ha-ops-etcd-backup.service") == "success"


def test_timer_is_enabled_persistent_and_randomized(host):
    timer = host.service("ha-ops-etcd-backup.timer")
    assert timer.is_enabled and timer.is_running
    show = host.check_output(
        "systemctl show -p TimersCalendar -p Persistent -p RandomizedDelayUSec ha-ops-etcd-backup.timer"
    )
    assert "03:17:00" in show and "Persistent=yes" in show and "RandomizedDelayUSec=5min" in show


def test_a_backup_writes_a_checksummed_snapshot_here_and_off_node(host):
    for key, value in KEYS.items():
        host.run_test("etcdctl put %s %s", key, value)
    back_up(host)
    dbs, sums = snapshots(host, BACKUPS)
    assert len(dbs) == 1 and sums == [dbs[0] + ".sha256"]
    assert dbs[0].startswith("hao-etcd-backup-1-") and dbs[0].endswith("Z.db")
    host.run_test(f"cd {BACKUPS} && sha256sum -c {sums[0]}")
    assert host.file(BACKUPS).mode == 0o700
    assert snapshots(target, REMOTE) == (dbs, sums)
    target.run_test(f"cd {REMOTE} && sha256sum -c {sums[0]}")


def test_retention_keeps_the_newest_n_here_while_the_target_keeps_every_copy(host):
    before, _ = snapshots(host, BACKUPS)
    for _ in range(KEEP + 1):
        back_up(host)
    dbs, sums = snapshots(host, BACKUPS)
    assert len(dbs) == KEEP and sums == [d + ".sha256" for d in dbs]
    assert before[0] not in dbs  # the oldest went, with its checksum
    remote, _ = snapshots(target, REMOTE)
    assert len(remote) == len(before) + KEEP + 1 and set(dbs) <= set(remote)
    assert "removed " + before[0] in host.check_output("journalctl -u ha-ops-etcd-backup.service --no-pager -o cat")


def test_a_failed_step_fails_the_run_loudly(host):
    def failed_run(message):
        run = host.run("systemctl start ha-ops-etcd-backup.service")
        assert run.rc != 0
        assert host.check_output("systemctl show -p Result --value ha-ops-etcd-backup.service") == "exit-code"
        log = host.check_output("journalctl -u ha-ops-etcd-backup.service --no-pager -o cat -n 30")
        assert f"ha-ops-etcd-backup: FAILED: {message}" in log, log

    target.run_test("systemctl stop ssh")
    try:
        failed_run("off-node copy to etcdbackup@")
    finally:
        target.run_test("systemctl start ssh")
    before = snapshots(host, BACKUPS)
    host.run_test("systemctl stop etcd")
    try:
        failed_run("snapshot save: no endpoint gave a snapshot (http://127.0.0.1:2379)")
    finally:
        host.run_test("systemctl start etcd")
    assert snapshots(host, BACKUPS) == before  # nothing half-written is left
    assert host.run(f"ls -A {BACKUPS} | grep -c part").stdout.strip() == "0"


def test_a_corrupted_snapshot_is_refused_and_nothing_is_touched(host):
    newest = snapshots(host, BACKUPS)[0][-1]
    member = host.check_output(f"stat -c %i {DATA}/member")
    host.run_test(f"cp {BACKUPS}/{newest} /root/bad.db && cp {BACKUPS}/{newest}.sha256 /root/bad.db.sha256")
    host.run_test("printf corrupt | dd of=/root/bad.db bs=1 seek=4096 conv=notrunc status=none")
    refused = host.run("/usr/local/sbin/ha-ops-etcd-restore /root/bad.db")
    assert refused.rc != 0 and "checksum mismatch" in refused.stderr, refused.stderr
    host.run_test("rm /root/bad.db.sha256")
    unchecked = host.run("/usr/local/sbin/ha-ops-etcd-restore /root/bad.db")
    assert unchecked.rc != 0 and "no checksum" in unchecked.stderr, unchecked.stderr
    assert host.service("etcd").is_running
    assert host.check_output(f"stat -c %i {DATA}/member") == member
    assert host.run("ls -d /var/lib/etcd/*.before-restore-*").rc != 0
    assert get(host, "/ha-ops/cluster") == "prod-a"


def test_after_the_data_dir_is_wiped_restore_brings_the_keys_back(host):
    host.run_test("etcdctl put /ha-ops/after-the-backup lost")
    host.run_test(f"systemctl stop etcd && rm -rf {DATA}")
    newest = snapshots(host, BACKUPS)[0][-1]
    restore = host.run(f"/usr/local/sbin/ha-ops-etcd-restore {BACKUPS}/{newest}")
    assert restore.rc == 0, restore.stderr
    assert host.service("etcd").is_running
    for key, value in KEYS.items():
        assert get(host, key) == value
    assert get(host, "/ha-ops/after-the-backup") == ""  # written after the snapshot: not in it
    assert host.file(DATA).user == "etcd" and host.file(DATA).mode == 0o700


def test_restoring_over_live_data_moves_it_aside(host):
    host.run_test("etcdctl put /ha-ops/only-in-the-old-data yes")
    newest = snapshots(host, BACKUPS)[0][-1]
    host.run_test(f"/usr/local/sbin/ha-ops-etcd-restore {BACKUPS}/{newest}")
    aside = host.check_output("ls -d /var/lib/etcd/default.before-restore-*").split()
    assert len(aside) == 1 and host.file(f"{aside[0]}/member").is_directory
    assert get(host, "/ha-ops/only-in-the-old-data") == ""
    assert get(host, "/ha-ops/nodes/gpu2") == "drained"
