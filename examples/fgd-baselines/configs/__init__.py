"""The scheduler config of each policy (one YAML file per policy), shipped as package data."""
