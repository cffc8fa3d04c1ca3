"""`stoker tune`: the advice Stoker gives, tried on the user's own script before they edit it.

The command (`command.py`) runs the script once as it is and once per candidate change, each
time for the first `fit`'s first N steps, in a process of its own (`trial.py` is what runs
inside it). A change is a rewrite of the user's own `tf.data` pipeline (`rebuild.py`) or of
the fit (`changes.py` says which apply and why others do not), and never touches the script
file; the line to edit is found in the user's source (`source.py`). `table.py` turns the
trials' figures into the verdicts the table prints and the server stores.
"""

# Steps each trial measures, unless `--steps` says otherwise.
DEFAULT_STEPS = 200
