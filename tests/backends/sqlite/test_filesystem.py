"""Which filesystem a store lives on (``backends.sqlite.files.filesystem``), through the seam:
the mountinfo text and the path, with rows as the kernel writes them on the machines
the store meets (Docker Desktop, OrbStack, Podman, WSL2, a NAS, sshfs, gVisor)."""

from __future__ import annotations

import os

import pytest

from hermes_store.backends.sqlite.files import filesystem
from hermes_store.backends.sqlite.files.filesystem import (
    classify,
    detect,
    mount_for,
    parse_mountinfo,
)

#: a Linux container on a macOS/Windows host: root on overlay, the Hermes home and a
#: project bind-mounted from the host, a native disk mounted inside a host share, a NAS,
#: an sshfs mount, and a folder name with a space (written \040 by the kernel)
MOUNTINFO = "\n".join([
    "1 0 0:52 / / rw,relatime master:1 - overlay overlay rw,lowerdir=/var/lib/docker/l1,upperdir=/var/lib/docker/u1,workdir=/var/lib/docker/w1",
    "22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw",
    # Docker Desktop / OrbStack: a host folder over virtiofs, bind-mounted (root is a subfolder)
    "653 1 0:165 /Users/alice/.hermes /root/.hermes rw,relatime master:185 - virtiofs mount0 rw",
    # Podman machine on an older macOS: 9p over virtio
    "654 1 0:166 /Users/alice/work /work rw,relatime - 9p vol0 rw,sync,dirsync,access=client,msize=131072,trans=virtio",
    # a native ext4 disk mounted inside the virtiofs share: local again
    "655 653 8:17 / /root/.hermes/local rw,relatime - ext4 /dev/sdb1 rw",
    "45 1 0:45 / /home rw,relatime shared:30 - nfs4 fileserver:/export/home rw,vers=4.2,rsize=1048576,wsize=1048576,hard,proto=tcp,sec=sys,local_lock=none,addr=10.0.0.2",
    "50 1 0:50 / /mnt/nas rw,relatime shared:35 - cifs //nas/share rw,vers=3.1.1,cache=strict,username=alice,uid=1000,forceuid,gid=1000",
    "60 45 0:55 / /home/alice/remote rw,nosuid,nodev,relatime shared:40 - fuse.sshfs alice@build:/srv rw,user_id=1000,group_id=1000",
    "61 1 8:33 / /mnt/my\\040disk rw,relatime - xfs /dev/sdc1 rw",
    # WSL2: C: drive over 9p (drvfs)
    "96 1 0:58 / /mnt/c rw,noatime - 9p drvfs rw,dirsync,aname=drvfs;path=C:\\;uid=1000;gid=1000,mmap,access=client,msize=262144,trans=virtio",
])


@pytest.mark.parametrize(("path", "fstype", "kind"), [
    ("/root/.hermes/state.db", "virtiofs", "vm-share"),
    ("/root/.hermes", "virtiofs", "vm-share"),
    ("/work/hermes/state.db", "9p", "vm-share"),
    ("/root/.hermes/local/state.db", "ext4", "local"),  # nested native mount wins
    ("/home/bob/.hermes/state.db", "nfs4", "network"),
    ("/mnt/nas/hermes/state.db", "cifs", "network"),
    ("/home/alice/remote/.hermes/state.db", "fuse.sshfs", "network"),  # inside nfs4 /home
    ("/mnt/my disk/state.db", "xfs", "local"),  # \040 decoded
    ("/mnt/c/Users/alice/state.db", "9p", "vm-share"),
    ("/root/.hermes-other/state.db", "overlay", "local"),  # a prefix by text, not by folder
    ("/var/lib/hermes/state.db", "overlay", "local"),
])
def test_each_row_classified(path, fstype, kind):
    fs = detect(path, mountinfo=MOUNTINFO, kernel="6.8.0-generic")
    assert (fs.fstype, fs.kind) == (fstype, kind)
    assert fs.wal_safe is (kind == "local")
    if kind != "local":
        assert fstype in fs.why_not_wal()
    else:
        assert fs.why_not_wal() is None


def test_a_folder_not_created_yet_is_looked_up_through_its_parent(tmp_path):
    fs = detect("/root/.hermes/profiles/new/state.db", mountinfo=MOUNTINFO, kernel="")
    assert fs.kind == "vm-share" and fs.path == "/root/.hermes/profiles/new/state.db"


def test_the_topmost_of_two_mounts_on_one_point_wins():
    text = ("1 0 0:1 / / rw - ext4 /dev/vda rw\n"
            "2 1 0:2 / /data rw - ext4 /dev/vdb rw\n"
            "3 1 0:3 / /data rw - nfs server:/x rw\n")
    assert detect("/data/state.db", mountinfo=text, kernel="").fstype == "nfs"


def test_9p_under_gvisor_is_one_kernel_so_local():
    # gVisor names every host-backed mount 9p (upstream #119614)
    text = "16 15 0:18 / / rw - 9p none rw,trans=fd,rfdno=3,wfdno=3,aname=/,cache=fscache\n"
    assert detect("/home/node/.hermes/state.db", mountinfo=text,
                  kernel="4.19.0-gvisor").kind == "local"
    assert detect("/home/node/.hermes/state.db", mountinfo=text,
                  kernel="6.8.0").kind == "vm-share"


@pytest.mark.parametrize(("fstype", "kind"), [
    ("nfs", "network"), ("nfs4", "network"), ("smb3", "network"), ("fuse.rclone", "network"),
    ("ceph", "network"), ("fakeowner", "vm-share"), ("vboxsf", "vm-share"),
    ("fuse.vmhgfs-fuse", "vm-share"), ("ext4", "local"), ("btrfs", "local"), ("zfs", "local"),
    ("tmpfs", "local"), ("fuse.fuse-overlayfs", "local"), ("fuseblk", "local"),
])
def test_classify(fstype, kind):
    assert classify(fstype) == kind


def test_no_mount_table_fails_open(tmp_path, monkeypatch):
    monkeypatch.setattr(filesystem, "MOUNTINFO", str(tmp_path / "no-such-mountinfo"))
    fs = detect(tmp_path)
    assert fs.kind == "unknown" and fs.wal_safe and fs.mount is None
    assert detect("/x", mountinfo="garbage line\n\n").kind == "unknown"


def test_malformed_rows_are_skipped():
    rows = parse_mountinfo("short row\n" + MOUNTINFO)
    assert len(rows) == len(MOUNTINFO.splitlines())
    assert mount_for("/root/.hermes", rows).source == "mount0"


def test_symlinked_folder_is_followed_to_its_mount(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    link.symlink_to(real)
    text = (f"1 0 0:1 / / rw - ext4 /dev/vda rw\n"
            f"2 1 0:2 / {real} rw - virtiofs mount0 rw\n")
    assert detect(link / "state.db", mountinfo=text, kernel="").kind == "vm-share"


@pytest.mark.skipif(not os.path.exists(filesystem.MOUNTINFO), reason="no /proc/self/mountinfo")
def test_the_filesystem_of_this_test_run_is_local(tmp_path):
    fs = detect(tmp_path / "state.db")
    assert fs.mount is not None, "this machine's mount table was not read"
    assert fs.kind == "local", fs.describe()
    assert fs.wal_safe
