"""The server's frame: the app factory, settings, database, models, dependencies, errors,
telemetry and agent lifecycle."""
