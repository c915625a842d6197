"""The error a malformed configuration raises (shared by the configuration's parsers)."""


class ConfigError(ValueError):
    """A configuration (or scenario) file is malformed; the message names the file, entry and field."""
