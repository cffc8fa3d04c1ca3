"""Stage 3: live updates to browsers (the hub, watched runs, the multi-process fan-out and
the browser socket)."""
