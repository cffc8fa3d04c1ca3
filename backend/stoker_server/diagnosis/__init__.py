"""Stage 2: verdicts over a sliding window per run, stalls, stragglers, alert rules and
webhooks, and their stored events."""
