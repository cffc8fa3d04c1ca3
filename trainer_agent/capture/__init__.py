"""Capture: what the agent does on the training thread. The Keras callback (callback,
train_function, input_wait) or a custom loop's monitor times each step and its input wait and
puts the rows in the run's recorder; the session owns one run; autolog and `stoker run` attach
the callback without changing the script; guard keeps the agent's errors out of the loop."""
