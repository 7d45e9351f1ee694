"""Data sets: what a generated set is (``definition``: its config and its shards' specs), the Ray
actors that write it as Parquet shards (``generation``), and where sets live: local folders or
S3, with bounded retries (``storage``).
"""
