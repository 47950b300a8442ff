"""ralph-index: Ralph's loop with an indexed memory instead of an ever-growing log."""

__version__ = "0.1.0"
