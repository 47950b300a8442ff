"""Files as read at one moment, so a later look at the same files reads only those that
changed since (an iteration looks at 10,000 references three times: the prompt, the
snapshot before the agent, the checks after it).

A file is known by its identity and its stat: device and inode, size, mtime and ctime (in
nanoseconds). Writing a file in place changes its mtime and ctime, replacing it (an atomic
write, a `git checkout`) changes its inode, and ctime cannot be set back (`touch -d` sets
mtime only), so an unchanged stat means unchanged bytes, as git's index assumes. One
exception, as in git ("racily clean" entries): a write within the file system's timestamp
granularity of the read leaves the same stat, so a file whose mtime or ctime is less than
that granularity before the moment reading began is never reused, it is read again: RACY_NS
for nanosecond timestamps, COARSE_RACY_NS for whole-second ones.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from orchestrator import fsutil

# Files changed this close to the read (or after it) are read again. Nanosecond timestamps
# (ext4, xfs, btrfs, tmpfs, APFS, NTFS, exFAT) advance at least every 10 ms (the kernel's
# clock tick); timestamps in whole seconds (ext3, HFS+, FAT's 2 s) need the wider window.
RACY_NS = 100_000_000
COARSE_RACY_NS = 2_000_000_000
_SECOND = 1_000_000_000

_Key = tuple[int, int, int, int, int]  # dev, inode, size, mtime_ns, ctime_ns


def _key(st: os.stat_result) -> _Key:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _racy(st: os.stat_result, started: int) -> bool:
    coarse = st.st_mtime_ns % _SECOND == 0 and st.st_ctime_ns % _SECOND == 0
    window = COARSE_RACY_NS if coarse else RACY_NS
    return max(st.st_mtime_ns, st.st_ctime_ns) >= started - window


class Seen:
    """The files read since `started` (time.time_ns() before the first read), by stat."""

    def __init__(self) -> None:
        self.started = time.time_ns()
        self._files: dict[_Key, bytes | str] = {}

    def add(self, st: os.stat_result, data: bytes | str) -> None:
        """`data` was read from the open file whose fstat (taken before reading) is `st`;
        text is kept as fsutil.read_text decodes it (bytes come back exactly)."""
        if st.st_ino and st.st_ctime_ns and not _racy(st, self.started):
            self._files[_key(st)] = data

    def get(self, st: os.stat_result) -> bytes | None:
        """The bytes read of the file whose stat is `st` now, None when they may differ."""
        data = self._files.get(_key(st))
        if data is None or isinstance(data, bytes):
            return data
        return data.encode("utf-8", errors="surrogateescape")

    def read_bytes(self, path: Path | str, into: Seen | None = None) -> bytes:
        """`path`'s bytes: the ones seen when its stat has not changed, else read now (the
        errors of fsutil.read_bytes). `into` records what is returned, for the next look."""
        try:
            st = os.stat(path)
        except OSError:
            st = None  # read below: fsutil says what is wrong
        data = self.get(st) if st is not None else None
        if data is None or st is None:
            data, st = fsutil.read_bytes_stat(path)
        if into is not None:
            into.add(st, data)
        return data

    def __len__(self) -> int:
        return len(self._files)
