"""How recorded rows reach the server: one background thread, three parts.

    recorder (training thread's rows)
      -> Outbox     seq-numbered batches, kept in memory until acknowledged, moved to the
                    disk spool while the server is unreachable, replayed in seq order
      -> Transport  WebSocket (stop-and-wait on acks, commands from the server) or HTTP POST
      -> server

`Sender` (sender.py) is the thread: it paces the flushes, decides when to try the server
again (`Reconnect`, backoff.py) and drains at the run's end. Every part takes its time from a
`Clock` (clock.py), so tests drive them without waiting.

Beside the live way: the disk spool (spool.py) keeps the batches the server has not
acknowledged, `stoker upload` and the next agent send them later (upload.py), and a profiler
capture's trace takes the same way (profile_spool.py). JSON for the wire and the spool:
wire.py.

Every HTTP request the agent makes, here and for spooled runs and profiler traces (upload.py,
profile_spool.py, profiling/profile.py), is posted by `classify.post` and its answer read by
`classify.classify`: delivered, refused (drop it, say why) or retry (keep it; a setting to fix
is said).
"""
