"""The loop: iterations, prompt assembly, selection, post-story checks, budgets."""
