"""Ray, S3 and MLflow runtime for linc: data set generation, Tune trials on the resolved trial
plan, data-parallel training, sweeps, tracking."""
