"""Memory upkeep: init, migrate a flat log, check, compact."""
