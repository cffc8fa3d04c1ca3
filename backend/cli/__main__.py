"""`python -m backend.cli`: the `stoker` command."""

import sys

from backend.cli.main import main

sys.exit(main())
