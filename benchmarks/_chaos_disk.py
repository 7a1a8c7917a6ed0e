"""The chaos run's disk (``chaos.py``): a small tmpfs mounted for the run, so that the
disk-full fault fills a real filesystem (a filler file takes every free block) and
frees it again. Mounting needs root; elsewhere the store lives in a plain directory and
the disk-full fault is skipped, with the reason in the report.
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

#: the mount's source name in /proc/mounts: a stale mount of an interrupted run is ours
SOURCE = "hermes-chaos"
FILLER = ".chaos-filler"
#: what fallocate leaves for the block-by-block writes that end the fill
MARGIN = 1 << 20


class Disk:
    """``root`` is a tmpfs of ``size_mb`` when it could be mounted (``reason`` says why
    not otherwise); the store lives in ``root/store``, the filler beside it."""

    def __init__(self, root: Path, size_mb: int) -> None:
        self.root, self.size_mb = root, size_mb
        self.store_dir = root / "store"
        self.filler = root / FILLER
        self.mounted = False
        #: why the disk-full fault cannot run here (None: it can)
        self.reason: str | None = None

    def setup(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if self._ours_mounted():
            self._umount()  # left by an interrupted run
        if os.geteuid() != 0:
            self.reason = "not root: a tmpfs cannot be mounted to fill"
        else:
            mounted = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m,mode=0700", SOURCE,
                 str(self.root)], capture_output=True, text=True)
            if mounted.returncode == 0:
                self.mounted = True
            else:
                self.reason = f"mount -t tmpfs failed: {mounted.stderr.strip() or mounted.returncode}"
        self.store_dir.mkdir(exist_ok=True)

    def free_bytes(self) -> int:
        st = os.statvfs(self.root)
        return st.f_bavail * st.f_frsize

    def fill(self) -> int:
        """Take every free block with the filler; returns its size in bytes."""
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            for _ in range(5):  # the store may grow between statvfs and fallocate
                try:
                    os.posix_fallocate(fd, os.fstat(fd).st_size,
                                       max(1, self.free_bytes() - MARGIN))
                    break
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
            os.lseek(fd, 0, os.SEEK_END)
            block = bytes(4096)
            try:
                while True:  # the margin, block by block
                    os.write(fd, block)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
        finally:
            os.close(fd)
        return self.filler.stat().st_size

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def teardown(self) -> None:
        self.free()
        if self.mounted:
            self._umount()
            self.mounted = False

    def _ours_mounted(self) -> bool:
        target = str(self.root.resolve())
        with open("/proc/mounts") as mounts:
            return any(line.split()[:2] == [SOURCE, target] for line in mounts)

    def _umount(self) -> None:
        if subprocess.run(["umount", str(self.root)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(self.root)], capture_output=True)
