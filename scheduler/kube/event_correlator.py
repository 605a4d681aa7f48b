"""How often one object's events are written: client-go's event correlator, as
kube-scheduler's event recorder applies it (tools/record/events_cache.go), on the
scheduler's clock.

Two rules bound what one pod gets, however often its gang is retried:

- **Spam filter** (`SpamFilter`): a token bucket per object (per source and object in
  client-go; this scheduler is one source): `SPAM_BURST` writes at once, then one more
  every `SPAM_REFILL_SECONDS`. A write the bucket refuses is not lost: its attempts stay
  counted and go out with the next write the bucket allows.
- **Similar messages** (`SimilarMessages`): an event whose message is unchanged bumps the
  `count` of the Event written before (one object per reason and message); a new message
  is a new Event object, but only `SIMILAR_MAX` of them per object within
  `SIMILAR_INTERVAL_SECONDS`. Past that, the newest Event is patched instead, its message
  prefixed with `COMBINED_PREFIX`, as client-go's aggregator combines them.

Pure: no I/O, the caller passes `now`.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

# client-go's defaults (defaultSpamBurst, defaultSpamQPS = 1/300).
SPAM_BURST = 25
SPAM_REFILL_SECONDS = 300.0
# client-go's defaultAggregateMaxEvents and defaultAggregateIntervalInSeconds.
SIMILAR_MAX = 10
SIMILAR_INTERVAL_SECONDS = 600.0
COMBINED_PREFIX = "(combined from similar events): "


@dataclass
class SpamFilter:
    """A token bucket of one object's event writes."""

    burst: int = SPAM_BURST
    refill_seconds: float = SPAM_REFILL_SECONDS
    tokens: float = float(SPAM_BURST)
    last: float | None = None

    def allow(self, now: float) -> bool:
        """Take one token if there is one (True), else False."""
        if self.last is not None and now > self.last:
            refilled = self.tokens + (now - self.last) / self.refill_seconds
            self.tokens = min(float(self.burst), refilled)
        if self.last is None or now > self.last:
            self.last = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


@dataclass
class SimilarMessages:
    """When the Event objects of one object and reason were created (one per distinct
    message), within the last SIMILAR_INTERVAL_SECONDS."""

    created_at: deque[float] = field(default_factory=deque)
    max_events: int = SIMILAR_MAX
    interval_seconds: float = SIMILAR_INTERVAL_SECONDS

    def may_create(self, now: float) -> bool:
        """Whether a new message may still get an Event object of its own."""
        while self.created_at and now - self.created_at[0] >= self.interval_seconds:
            self.created_at.popleft()
        return len(self.created_at) < self.max_events

    def created(self, now: float) -> None:
        self.created_at.append(now)
