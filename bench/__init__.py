"""Load and compute benchmark for the autowrap admission webhook against a bare aiohttp floor."""
