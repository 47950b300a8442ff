"""The simulated agent (a separate executable) and the bundled examples."""
