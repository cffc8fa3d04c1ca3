"""`python -m stoker_server.cli`: the `stoker` command."""

import sys

from trainer_agent.cli.main import main

sys.exit(main())
