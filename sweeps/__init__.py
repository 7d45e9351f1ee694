"""Hydra configs and job entry points (filled by the platform issue)."""
