"""What every part of the project shares and the kernel is not: durations, the bounded YAML loader of
file inputs, the configuration error and Kubernetes quantities. Imports nothing else of ``kai``."""
