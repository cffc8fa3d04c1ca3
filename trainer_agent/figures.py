"""How Stoker writes a figure in text: one function per quantity, used by every text the
server writes (evidence, advice, alert messages, events, webhooks, the demo's report) and by
`stoker top`. Here, in the base install, because `stoker top` has no server to import.

The browser writes the same quantities with its own functions (frontend/src/app/format.ts);
both are checked against one table of cases (frontend/src/app/formats.cases.json), so a
figure reads the same wherever it is shown. Rounding is JavaScript's `toFixed` (half up, on
the number's exact value), so that both agree on ties.
"""

from decimal import ROUND_HALF_UP, Decimal

# An input-wait share is shown, and judged, to a tenth of a percent (the server's
# levels.shown_share rounds the shares it sends so).
SHARE_DECIMALS = 3


def fixed(value: float, digits: int) -> str:
    """`value` with `digits` decimals, rounded as JavaScript's `Number.toFixed` rounds."""
    return str(Decimal(value).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


def share_text(share: float) -> str:
    """A share of step time (input wait), to a tenth of a percent: "5.1 %". The same figure
    every surface shows (the server's levels.shown_share)."""
    return f"{fixed(round(share, SHARE_DECIMALS) * 100, 1)} %"


def percent_text(percent: float) -> str:
    """A reading already in percent (GPU utilization, SM activity, host CPU): "87 %"."""
    return f"{fixed(percent, 0)} %"


def ms_text(seconds: float) -> str:
    """A step-scale duration: "0.42 ms", "42.1 ms", "421 ms", "1.23 s", "12.3 s", "2m 05s"."""
    ms = seconds * 1000
    size = abs(ms)
    if size < 10:
        return f"{fixed(ms, 2)} ms"
    if size < 100:
        return f"{fixed(ms, 1)} ms"
    if size < 1000:
        return f"{fixed(ms, 0)} ms"
    if size < 60_000:
        return f"{fixed(ms / 1000, 2 if size < 10_000 else 1)} s"
    return duration_text(seconds)


def duration_text(seconds: float) -> str:
    """A wall-clock duration: "0s", "42s", "3m 05s", "1h 02m", "2d 03h"."""
    if seconds < 1:
        return "0s" if seconds <= 0 else f"{fixed(seconds, 1)}s"
    total = int(seconds)
    days, hours = divmod(total, 86_400)
    hours, minutes = divmod(hours, 3600)
    minutes, secs = divmod(minutes, 60)
    if days:
        return f"{days}d {hours:02d}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def count_text(count: int) -> str:
    """A count with thousands separators: "2,070"."""
    return f"{count:,}"


def rate_text(rate: float) -> str:
    """A rate such as samples per second: "1,234", "123", "12.3", "1.23"."""
    size = abs(rate)
    if size >= 1000:
        return count_text(int(fixed(rate, 0)))
    return fixed(rate, 0 if size >= 100 else 1 if size >= 10 else 2)


def lost_time_text(seconds: float) -> str:
    """Device time lost to input starvation: "42 s", "12.5 min", from an hour on "42.7 h"."""
    if seconds <= 0:
        return "0 s"
    if seconds < 60:
        return f"{fixed(seconds, 1 if seconds < 10 else 0)} s"
    if seconds < 3600:
        minutes = seconds / 60
        return f"{fixed(minutes, 1 if minutes < 10 else 0)} min"
    hours = seconds / 3600
    return f"{fixed(hours, 2 if hours < 10 else 1 if hours < 100 else 0)} h"
