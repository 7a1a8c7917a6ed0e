"""Which filesystem a state.db lives on, and whether SQLite's WAL can work there.

WAL keeps its index in shared memory (the ``-shm`` file, mapped by every connection).
That works only where every process maps the same pages under one kernel: across a VM
boundary (Docker Desktop, OrbStack and Podman bind mounts are virtiofs or 9p) or a
network filesystem (NFS, SMB, sshfs), two writers can each see their own copy, and the
file is corrupted within minutes (upstream #110848). SQLite: "WAL does not work over a
network filesystem". So the store picks the journal for a *new* file from the filesystem
under its folder (``hermes_store.backends.sqlite.files.journal``).

``detect(path, *, mountinfo=None, kernel=None) -> Filesystem``
    The mount that holds ``path`` (the database file, or its folder; a path not
    created yet is looked up through its nearest existing parent, symlinks resolved;
    a file bind-mounted on its own is its own mount): the longest mount
    point that is a prefix of the path, the last one listed when several are mounted on
    the same point (the topmost). ``mountinfo`` is the text of ``/proc/self/mountinfo``
    and ``kernel`` the kernel release (both read from this process when not given: the
    seam the tests use). Fails open: where the table cannot be read (macOS, Windows, a
    sandbox without ``/proc``) the kind is ``unknown`` and WAL stays on.
``classify(fstype, *, kernel="") -> str``
    ``local``, ``vm-share`` or ``network`` for one filesystem type as mountinfo spells it.
``parse_mountinfo(text) -> list[Mount]``
    The rows of a mountinfo table (``proc(5)``), octal escapes in paths decoded.
"""

from __future__ import annotations

import os
from typing import NamedTuple
from pathlib import Path

from ....paths import expand_home

#: where Linux lists the mounts this process sees
MOUNTINFO = "/proc/self/mountinfo"

#: filesystems that cross a VM boundary: host folders shared into a Linux VM or
#: container (Docker Desktop, OrbStack, Podman machine, WSL2 ``/mnt/c``, VirtualBox,
#: VMware, Parallels). Their ``-shm`` mapping is not shared with the host side.
VM_SHARE_TYPES = frozenset({
    "virtiofs", "fuse.virtiofs", "9p", "9p2000", "9p2000.l", "9p2000.u", "vboxsf",
    "vmhgfs", "fuse.vmhgfs-fuse", "prl_fs", "fakeowner", "fuse.grpcfuse", "fuse.osxfs",
    "drvfs",
})
#: network and cluster filesystems, kernel or FUSE (``fuse.<program>``): another machine
#: holds the file, and WAL's shared memory cannot reach it
NETWORK_TYPES = frozenset({
    "nfs", "nfs4", "cifs", "smb", "smb2", "smb3", "smbfs", "ceph", "glusterfs", "lustre",
    "afs", "coda", "ncpfs", "davfs", "orangefs", "beegfs", "gpfs",
    "fuse.sshfs", "fuse.rclone", "fuse.s3fs", "fuse.gcsfuse", "fuse.goofys",
    "fuse.glusterfs", "fuse.ceph-fuse", "fuse.cephfs", "fuse.davfs2", "fuse.juicefs",
    "fuse.mfs", "fuse.mfsmount", "fuse.s3ql", "fuse.blobfuse", "fuse.blobfuse2",
    "fuse.smbnetfs", "fuse.curlftpfs", "fuse.onedriver", "fuse.kbfsfuse",
    "fuse.mountpoint-s3", "fuse.geesefs", "fuse.seaweedfs", "fuse.lizardfs",
    "fuse.gvfsd-fuse", "fuse.nfs", "fuse.smb",
})
#: the kinds on which the store turns WAL on for a new file
WAL_SAFE_KINDS = frozenset({"local", "unknown"})

_KIND_WHY = {
    "vm-share": "a folder shared across a VM boundary (Docker Desktop, OrbStack, Podman, "
                "WSL2), where WAL's shared memory is not shared between the two sides",
    "network": "a network filesystem, where WAL's shared memory cannot work (SQLite: "
               "\"WAL does not work over a network filesystem\")",
}


class Mount(NamedTuple):
    """One row of a mountinfo table."""

    mount_point: str
    fstype: str
    source: str
    root: str = "/"


class Filesystem(NamedTuple):
    """The filesystem under a path: its mount (None when unknown) and its ``kind``."""

    path: str
    kind: str  # local | vm-share | network | unknown
    mount: Mount | None = None

    @property
    def wal_safe(self) -> bool:
        """Whether WAL is turned on for a new file here (``unknown`` fails open)."""
        return self.kind in WAL_SAFE_KINDS

    @property
    def fstype(self) -> str | None:
        return self.mount.fstype if self.mount else None

    def describe(self) -> str:
        """One line for people: ``ext4 (local) at /``, ``virtiofs (vm-share) at /data``."""
        if self.mount is None:
            return "unknown (no mount table readable here)"
        return f"{self.mount.fstype} ({self.kind}) mounted at {self.mount.mount_point}"

    def why_not_wal(self) -> str | None:
        """Why WAL is unsafe here, or None where it is safe."""
        reason = _KIND_WHY.get(self.kind)
        return None if reason is None else f"{self.fstype} is {reason}"

    def as_dict(self) -> dict:
        return {"kind": self.kind, "fstype": self.fstype,
                "mount_point": self.mount.mount_point if self.mount else None,
                "wal_safe": self.wal_safe, "summary": f"{self.fstype or 'unknown'} ({self.kind})"}


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash in paths as ``\\ooo``."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        chunk = field[i:i + 4]
        if field[i] == "\\" and len(chunk) == 4 and chunk[1:].isdigit():
            out.append(chr(int(chunk[1:], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[Mount]:
    """The rows of ``text`` in table order; malformed rows are skipped.

    A row: ``ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL…] - FSTYPE SOURCE
    SUPER_OPTIONS`` (the optional fields end at the lone ``-``).
    """
    mounts = []
    for line in text.splitlines():
        fields = line.split()
        try:
            sep = fields.index("-", 6)
            fstype, source = fields[sep + 1], fields[sep + 2]
        except (ValueError, IndexError):
            continue
        mounts.append(Mount(_unescape(fields[4]), fstype, _unescape(source),
                            _unescape(fields[3])))
    return mounts


def _contains(mount_point: str, path: str) -> bool:
    if mount_point == "/":
        return True
    mount_point = mount_point.rstrip("/")
    return path == mount_point or path.startswith(mount_point + "/")


def mount_for(path: str, mounts: list[Mount]) -> Mount | None:
    """The mount that holds ``path`` (absolute, resolved): the longest mount point that
    is a whole-component prefix; among mounts on the same point the last listed (it
    sits on top of the others)."""
    best: Mount | None = None
    for mount in mounts:
        if _contains(mount.mount_point, path) and (
            best is None or len(mount.mount_point.rstrip("/")) >= len(best.mount_point.rstrip("/"))
        ):
            best = mount
    return best


def _kernel_release() -> str:
    try:
        return os.uname().release
    except AttributeError:  # Windows
        return ""


def classify(fstype: str, *, kernel: str = "") -> str:
    """``local``, ``vm-share`` or ``network`` for a mountinfo filesystem type.

    gVisor (``runsc``) names every host-backed mount ``9p`` after its gofer protocol,
    but the sandbox and its files share one kernel, so WAL is safe there (upstream
    #119614): 9p under a gVisor kernel is ``local``.
    """
    name = fstype.lower()
    if name in NETWORK_TYPES or name.startswith("nfs"):
        return "network"
    if name in VM_SHARE_TYPES or name.startswith("9p"):
        if name.startswith("9p") and "gvisor" in kernel.lower():
            return "local"
        return "vm-share"
    return "local"


def resolved_path(path: str | os.PathLike) -> str:
    """``path`` absolute with symlinks resolved; a part that does not exist yet (a store
    about to be created) is kept under its nearest existing parent's real path."""
    p = expand_home(path).absolute()
    missing: list[str] = []
    while not p.exists() and p != p.parent:
        missing.append(p.name)
        p = p.parent
    real = Path(os.path.realpath(p))
    for part in reversed(missing):
        real = real / part
    return str(real)


def read_mountinfo() -> str | None:
    """This process's mount table, or None where there is none (not Linux, no /proc)."""
    try:
        with open(MOUNTINFO, encoding="utf-8", errors="surrogateescape") as fh:
            return fh.read()
    except OSError:
        return None


def detect(path: str | os.PathLike, *, mountinfo: str | None = None,
           kernel: str | None = None) -> Filesystem:
    """The filesystem under ``path`` (a file or a folder; see the module doc)."""
    where = resolved_path(path)
    text = read_mountinfo() if mountinfo is None else mountinfo
    if not text:
        return Filesystem(where, "unknown")
    mount = mount_for(where, parse_mountinfo(text))
    if mount is None:
        return Filesystem(where, "unknown")
    kernel = _kernel_release() if kernel is None else kernel
    return Filesystem(where, classify(mount.fstype, kernel=kernel), mount)
