"""Stage 1: agents deliver (protocol, socket and HTTP routes), the writer stores, summaries
follow, and what was stored is published to telemetry, browsers and detectors."""
