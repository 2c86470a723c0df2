"""The package version, in its own module so that no library module imports the package face."""

__version__ = "0.3.0"
