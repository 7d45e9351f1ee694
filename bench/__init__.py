"""`make bench`: throughput figures measured side by side with peers, in one process."""
