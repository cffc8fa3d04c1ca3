"""How recorded rows reach the server: one background thread, three parts.

    recorder (training thread's rows)
      -> Outbox     seq-numbered batches, kept in memory until acknowledged, moved to the
                    disk spool while the server is unreachable, replayed in seq order
      -> Transport  WebSocket (stop-and-wait on acks, commands from the server) or HTTP POST
      -> server

`Sender` (sender.py) is the thread: it paces the flushes, decides when to try the server
again (`Reconnect`, backoff.py) and drains at the run's end. Every part takes its time from a
`Clock` (clock.py), so tests drive them without waiting.
"""
