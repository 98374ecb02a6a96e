"""The package version (one place: the package, the client's User-Agent and the API)."""

__version__ = "0.1.0"
