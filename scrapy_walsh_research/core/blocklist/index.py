"""A blocklist's entries as one file the crawl process maps, not builds.

A 10^6-entry list indexed as Python dicts costs the crawl process seconds of
pure-Python work (GIL held: reactor stalls of 0.1-0.4 s even from a thread)
and hundreds of MB. A child process builds this file instead; the crawl
process opens it (``mmap``, a header check) and swaps it in by reference.

Layout (little-endian): a 32-byte header (magic, slot count, entry count,
offset of the records), then an open-addressing hash table of
``(hash, record offset)`` pairs, ``slots`` a power of two at least twice the
entries (hash 0 marks an empty slot), then the records: ``u32 length``,
the host name, ``\\0``, the entry as JSON. A lookup hashes the name
(two CRC-32s, 8 bytes), probes the table and compares the name stored in
the record: cost O(1), whatever the list's size.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import sys
import zlib
from array import array
from collections.abc import Iterator, Mapping
from typing import Any

MAGIC = b"WALSHIX2"  # 2: CRC-32 hashes (1 was blake2b)
_HEADER = struct.Struct("<8sQQQ")
_SLOT = struct.Struct("<QQ")
_LENGTH = struct.Struct("<I")


def _hash(name: bytes) -> int:
    # Not cryptographic: names are compared on a match, so only the spread
    # over slots matters (the low bits: the first CRC). Two CRC-32s cost
    # 0.3 us against blake2b's 1 us, four times per host looked up (a name
    # and each parent domain): 10^6 entries were 2.4x the in-memory lookup.
    return (zlib.crc32(name) | zlib.crc32(name, 0x9E3779B9) << 32) or 1


def write_index(entries: Mapping[str, dict[str, Any]], path: str) -> None:
    """Write *entries* (host name -> entry) to *path* (replaced atomically)."""
    slots = 8
    while slots < 2 * len(entries):
        slots *= 2
    mask = slots - 1
    table = array("Q", bytes(16 * slots))
    records = bytearray()
    base = _HEADER.size + 16 * slots
    for name, entry in entries.items():
        key = name.encode()
        record = key + b"\0" + json.dumps(entry, separators=(",", ":")).encode()
        h = _hash(key)
        i = h & mask
        while table[2 * i]:
            i = (i + 1) & mask
        table[2 * i] = h
        table[2 * i + 1] = base + len(records)
        records += _LENGTH.pack(len(record))
        records += record
    if sys.byteorder != "little":  # pragma: no cover
        table.byteswap()
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(_HEADER.pack(MAGIC, slots, len(entries), base))
        f.write(table.tobytes())
        f.write(records)
    os.replace(tmp, path)


class IndexFile(Mapping[str, dict[str, Any]]):
    """The mapping a :func:`write_index` file holds, read through ``mmap``.

    The file may be unlinked once opened: the mapping keeps it."""

    def __init__(self, path: str) -> None:
        with open(path, "rb") as f:
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        magic, slots, count, base = _HEADER.unpack_from(self._map, 0)
        if magic != MAGIC or slots & (slots - 1) or base != _HEADER.size + 16 * slots:
            raise ValueError(f"{path} is not a blocklist index")
        if len(self._map) < base:
            raise ValueError(f"{path} is truncated")
        self._mask: int = slots - 1
        self._count: int = count
        self._base: int = base

    def _record(self, offset: int) -> tuple[bytes, bytes]:
        (length,) = _LENGTH.unpack_from(self._map, offset)
        start = offset + _LENGTH.size
        name, _, entry = self._map[start : start + length].partition(b"\0")
        return name, entry

    def get(self, name: str, default: Any = None) -> Any:
        key = name.encode()
        h = _hash(key)
        i = h & self._mask
        while True:
            stored, offset = _SLOT.unpack_from(self._map, _HEADER.size + 16 * i)
            if not stored:
                return default
            if stored == h:
                found, entry = self._record(offset)
                if found == key:
                    return json.loads(entry)
            i = (i + 1) & self._mask

    def __getitem__(self, name: str) -> dict[str, Any]:
        entry = self.get(name)
        if entry is None:
            raise KeyError(name)
        return entry  # type: ignore[no-any-return]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[str]:
        offset, end = self._base, len(self._map)
        while offset < end:
            name, _ = self._record(offset)
            (length,) = _LENGTH.unpack_from(self._map, offset)
            offset += _LENGTH.size + length
            yield name.decode()
