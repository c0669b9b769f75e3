"""The error every invalid user input raises (the CLI turns it into exit code 2)."""


class ConfigError(ValueError):
    """Invalid user input (config file, key, value), raised before any work starts."""
