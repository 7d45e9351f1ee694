"""Ray, S3 and MLflow runtime for linc (filled by the data and platform issues)."""
