"""Ralph's files: prd.json, progress.txt and its index, the references."""
