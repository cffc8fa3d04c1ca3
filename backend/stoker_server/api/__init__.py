"""The REST API the UI reads (runs, series, compare, diagnosis, alerts) and user edits."""
