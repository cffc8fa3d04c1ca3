"""When to try the server again after a failure."""

import random

from trainer_agent.delivery.clock import SYSTEM_CLOCK, Clock


class Backoff:
    """Capped exponential backoff with full jitter: the n-th delay lies in [c/2, c], where
    c = min(max_s, initial_s * 2**n)."""

    def __init__(
        self, initial_s: float = 0.5, max_s: float = 30.0, rng: random.Random | None = None
    ) -> None:
        self._initial_s = initial_s
        self._max_s = max_s
        self._attempt = 0
        self._rng = rng or random.Random()

    def next_delay_s(self) -> float:
        ceiling = min(self._max_s, self._initial_s * 2**self._attempt)
        self._attempt += 1
        return self._rng.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self._attempt = 0


class Reconnect:
    """Whether the server is known to be down, and when the next attempt is due."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK, backoff: Backoff | None = None) -> None:
        self._clock = clock
        self._backoff = backoff or Backoff()
        self._next_attempt_at = 0.0
        self.down = False

    def may_try(self, *, force: bool = False) -> bool:
        return force or self._clock.monotonic() >= self._next_attempt_at

    def failed(self) -> bool:
        """An attempt failed: back off. True when the server was up until now."""
        self._next_attempt_at = self._clock.monotonic() + self._backoff.next_delay_s()
        was_up, self.down = not self.down, True
        return was_up

    def succeeded(self) -> bool:
        """The server answered. True when it was down until now."""
        self._backoff.reset()
        was_down, self.down = self.down, False
        return was_down
