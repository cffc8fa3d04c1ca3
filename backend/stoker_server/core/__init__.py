"""The server's frame, below every other layer: settings, database, models, errors, the
middleware, the verdict levels and the step-chunk store. It imports no other layer (the layers
contract in pyproject.toml)."""
