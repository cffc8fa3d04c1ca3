"""`python -m stoker_server.cli`: the `stoker` command."""

import sys

from stoker_server.cli.main import main

sys.exit(main())
