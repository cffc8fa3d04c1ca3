"""How the diagnosis writes shares and durations in its texts."""


def pct(share: float) -> str:
    return f"{share * 100:.0f} %"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"
