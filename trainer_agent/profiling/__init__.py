"""Profiling: the TensorFlow profiler captures the server asks for, taken at step
boundaries; a capture's trace reaches the server through delivery/profile_spool."""
