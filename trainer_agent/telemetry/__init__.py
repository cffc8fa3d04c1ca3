"""Telemetry: the readings beside the training. The sampler thread reads the GPUs through
NVML (nvml, gpm, energy, gpu_extras, throttle) and the host, into the run's recorder; the
environment report goes once in the hello."""
