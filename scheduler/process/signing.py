"""The key that signs the scheduler's GPU assignments (docs/security.md).

The binder signs the assignment of every Binding (cache.gpu.sign_assignment) and the
cache charges a bound pod's assignment as written only with a valid signature, so a
value a tenant wrote never moves a charge. The key is shared by the scheduler's
replicas through a Secret mounted as a file (deploy/scheduler.yaml); without one each
process draws its own, which is as safe but forgets, after a restart or a change of
leader, which GPUs earlier binds took (those charges are then inferred).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from cache.gpu import MIN_KEY_BYTES

log = logging.getLogger(__name__)


def load_assignment_key(path: str) -> bytes:
    """The key in the file at `path` (surrounding whitespace dropped, at least
    MIN_KEY_BYTES bytes); a random key for this process when `path` is empty, missing,
    unreadable or too short (logged: never a failure, never an unsigned trust)."""
    if path:
        try:
            key = Path(path).read_bytes().strip()
        except FileNotFoundError:
            log.warning(
                "assignment signing key %s does not exist: using a key of this process "
                "only; after a restart earlier GPU assignments are inferred (docs/security.md)",
                path,
            )
        except OSError as error:
            log.error("cannot read the assignment signing key %s: %s", path, error)
        else:
            if len(key) >= MIN_KEY_BYTES:
                return key
            log.error(
                "the assignment signing key in %s has %d bytes, fewer than %d: not used",
                path,
                len(key),
                MIN_KEY_BYTES,
            )
    return os.urandom(32)
