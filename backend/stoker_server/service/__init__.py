"""The server assembled: the app factory, its long-lived state and the dependencies routes
take from it, the reaper, the gauges. It imports every layer; nothing below imports it."""
