"""The keys that sign the scheduler's GPU assignments (docs/security.md).

The binder signs the assignment of every Binding (cache/signing.py) and the cache
charges a bound pod's assignment as written only with a valid signature, so a value a
tenant wrote never moves a charge. Every replica must hold the same keys, or a new
leader cannot verify the old one's binds: the keys live in a Secret the scheduler
creates at its first start (scheduler/kube/signing_secret.py), or in a file or mounted
directory the operator provides (`assignmentSigning.keyFile`).

A key ring is read from named entries (the data of the Secret, or the files of a
directory): `key-<N>` (N a whole number) or `key` (as N = 0); the highest N signs and
every entry verifies, so a rotation adds `key-<N+1>` and keeps the old entry until the
pods it signed have ended. Anything else is refused with one line: a scheduler that
cannot have its keys does not start (docs/operator-guide.md).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path

from cache.gpu import MIN_KEY_BYTES
from cache.signing import SigningKeys

log = logging.getLogger(__name__)

KEY_ENTRY = re.compile(r"key(?:-([1-9][0-9]{0,8}))?")
# Bytes of a key the scheduler draws itself (the Secret's first entry, a process key).
NEW_KEY_BYTES = 32
# The first entry of a Secret the scheduler creates.
FIRST_ENTRY = "key-1"


class KeyProblem(ValueError):
    """The configured keys cannot be used; the message says why in one line."""


def key_generation(name: str) -> int | None:
    """N of an entry named `key-<N>`, 0 for `key`, None for any other name."""
    match = KEY_ENTRY.fullmatch(name)
    if match is None:
        return None
    return int(match.group(1) or 0)


def ring_from_entries(entries: Mapping[str, bytes], where: str) -> SigningKeys:
    """The ring of the key entries of `entries` (other names are ignored), newest
    first. KeyProblem when there is none, or one is shorter than MIN_KEY_BYTES once
    surrounding whitespace is dropped."""
    numbered: list[tuple[int, bytes]] = []
    for name, value in entries.items():
        generation = key_generation(name)
        if generation is None:
            continue
        key = value.strip()
        if len(key) < MIN_KEY_BYTES:
            raise KeyProblem(
                f"the signing key {name!r} in {where} has {len(key)} bytes, fewer than "
                f"{MIN_KEY_BYTES}"
            )
        numbered.append((generation, key))
    if not numbered:
        raise KeyProblem(f"{where} has no signing key (an entry named key-1, key-2, ... or key)")
    numbered.sort(reverse=True)
    return SigningKeys(numbered[0][1], tuple(key for _, key in numbered[1:]))


def load_key_file(path: str) -> SigningKeys:
    """The ring at `path`: one key in a file, or the key entries of a directory (a
    Secret mounted as a volume: one file per entry). KeyProblem when it cannot be read
    or holds no usable key."""
    target = Path(path)
    try:
        if target.is_dir():
            entries = {
                item.name: item.read_bytes()
                for item in target.iterdir()
                if key_generation(item.name) is not None and item.is_file()
            }
            return ring_from_entries(entries, f"directory {path}")
        return ring_from_entries({"key": target.read_bytes()}, f"file {path}")
    except OSError as error:
        raise KeyProblem(f"cannot read the signing key {path}: {error.strerror or error}") from None


def process_key() -> SigningKeys:
    """A key of this process only (neither `keyFile` nor `secretName` configured: the
    simulator, a demo, a test). Logged: after a restart or a change of leader nothing
    signed with it verifies, and those pods are charged at their worst (every GPU of
    their node) until they end."""
    log.warning(
        "assignmentSigning has neither keyFile nor secretName: signing with a key of this "
        "process only; after a restart or a change of leader, pods bound before hold every "
        "GPU of their node in the books until they end (docs/security.md)"
    )
    return SigningKeys(os.urandom(NEW_KEY_BYTES))
