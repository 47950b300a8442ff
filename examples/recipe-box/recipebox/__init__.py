"""recipe-box: a small recipe manager on the Python standard library."""

__version__ = "0.1.0"
