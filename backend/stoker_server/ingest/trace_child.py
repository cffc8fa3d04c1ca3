"""The child process that analyses a profiler trace (ingest/profile_analysis.py, `analyse`).

It reads `{"paths": [...], "max_bytes": N}` on stdin, limits its own address space to N bytes
and lowers its priority before xprof loads, and writes the analysis as one JSON line on
stdout. Whatever goes wrong (a malformed trace, the limit, a crash in the converter) ends this
process only: its exit status and stderr tell the server.
"""

import json
import os
import resource
import sys
from pathlib import Path


def main() -> int:
    request = json.loads(sys.stdin.read())
    limit = int(request["max_bytes"])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    os.nice(10)  # the server's own work (ingest, reads) comes first

    from stoker_server.ingest.profile_analysis import analyse_here

    analysis, share, steps = analyse_here([Path(p) for p in request["paths"]])
    print(json.dumps({"analysis": analysis, "share": share, "steps": steps}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
