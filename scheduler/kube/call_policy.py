"""How long an API call may take and how it is retried: stated once, used by every call.

docs/kubernetes.md ("Timeouts and retries") is the rule in words. In short:

- Every request has a time limit. A request given none by its caller gets
  `timeout_seconds` (`client.requestTimeoutSeconds`), so a black-holed connection (an
  API server or proxy that accepts a request and never answers) costs one limit, never
  a stalled task. Binds, the Lease, lists and watches set limits of their own (the bind
  budget, the renew deadline, the read timeouts of a list or a watch).
- A write is retried only where repeating it is safe: it is idempotent (a merge patch
  that sets absolute values, a read) or guarded by a precondition (a uid, a
  resourceVersion, a JSON-patch test) that makes a repeat of a write that already landed
  harmless. Which call is which is decided at the call (`KubeClient.call`'s `retry_on`)
  and listed in docs/kubernetes.md.
- Retried are the failures that may be transient: no answer in time, a dropped
  connection, a 5xx, a 429 (except where a 429 is an answer: an eviction that a
  PodDisruptionBudget refuses). Up to `attempts` tries in all, with tenacity's jittered
  exponential backoff from `initial_backoff_seconds` up to `max_backoff_seconds`, as
  the binder's reads and deletes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_random_exponential

RetryOn = Callable[[BaseException], bool]

DEFAULT_REQUEST_TIMEOUT = 10.0
DEFAULT_ATTEMPTS = 3
DEFAULT_INITIAL_BACKOFF = 0.2
DEFAULT_MAX_BACKOFF = 2.0


@dataclass(frozen=True)
class CallPolicy:
    timeout_seconds: float = DEFAULT_REQUEST_TIMEOUT
    attempts: int = DEFAULT_ATTEMPTS
    initial_backoff_seconds: float = DEFAULT_INITIAL_BACKOFF
    max_backoff_seconds: float = DEFAULT_MAX_BACKOFF

    def __post_init__(self) -> None:
        if self.timeout_seconds <= 0 or self.attempts < 1:
            raise ValueError("timeout_seconds must be positive and attempts at least 1")
        if not 0 < self.initial_backoff_seconds <= self.max_backoff_seconds:
            raise ValueError("need 0 < initial_backoff_seconds <= max_backoff_seconds")

    def timeout(self) -> aiohttp.ClientTimeout:
        """The limit of one request whose caller set none."""
        return aiohttp.ClientTimeout(total=self.timeout_seconds)

    def retrying(self, retry_on: RetryOn) -> AsyncRetrying:
        """Tries of one call: `retry_on` says which failures are worth another."""
        return AsyncRetrying(
            stop=stop_after_attempt(self.attempts),
            wait=wait_random_exponential(
                multiplier=self.initial_backoff_seconds, max=self.max_backoff_seconds
            ),
            retry=retry_if_exception(retry_on),
            reraise=True,
        )
