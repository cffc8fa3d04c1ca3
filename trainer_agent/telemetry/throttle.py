"""NVML's clock-event (throttle) reasons bitmask as named flags (nvml.h nvmlClocksEventReason*).

Pure data, no NVML: the server names the flags of stored rows with it, and `bench/gpu_check.py`
prints them.
"""

# bit → (flag, words, slows the GPU down)
THROTTLE_REASONS: dict[int, tuple[str, str, bool]] = {
    0x1: ("gpu_idle", "idle", False),
    0x2: ("applications_clocks", "application clock setting", False),
    0x4: ("sw_power_cap", "power cap", True),
    0x8: ("hw_slowdown", "hardware slowdown", True),
    0x10: ("sync_boost", "sync boost", False),
    0x20: ("sw_thermal", "thermal slowdown (software)", True),
    0x40: ("hw_thermal", "thermal slowdown (hardware)", True),
    0x80: ("hw_power_brake", "power brake", True),
    0x100: ("display_clocks", "display clock setting", False),
}
SLOWING_MASK = sum(bit for bit, (_, _, slows) in THROTTLE_REASONS.items() if slows)


def throttle_flags(mask: int | None) -> list[str]:
    """The flag names set in `mask` (bits NVML does not define yet: `bit_<n>`)."""
    if mask is None:
        return []
    mask = int(mask)
    flags = [flag for bit, (flag, _, _) in THROTTLE_REASONS.items() if mask & bit]
    known = sum(THROTTLE_REASONS)
    unknown = mask & ~known
    bit = 0
    while unknown >> bit:
        if unknown >> bit & 1:
            flags.append(f"bit_{bit}")
        bit += 1
    return flags


def throttle_words(mask: int | None, *, slowing_only: bool = True) -> list[str]:
    """What the set reasons mean, in words (`power cap`, ...); only those that slow the GPU
    down unless `slowing_only` is False."""
    if mask is None:
        return []
    return [
        words
        for bit, (_, words, slows) in THROTTLE_REASONS.items()
        if int(mask) & bit and (slows or not slowing_only)
    ]
