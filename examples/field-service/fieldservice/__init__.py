"""Field service management (example project for ralph-index)."""
