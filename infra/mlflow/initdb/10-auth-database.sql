-- Run once by the postgres image on an empty data volume: the basic-auth app keeps its users and
-- permissions in a database of its own, next to the tracking store's `mlflow` database.
CREATE DATABASE mlflow_auth;
