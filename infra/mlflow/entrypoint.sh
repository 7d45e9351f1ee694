#!/usr/bin/env bash
# Starts `mlflow server --app-name basic-auth` (MLflow 3.17) from environment variables only, so
# that compose and Kubernetes inject every secret from outside the image and the repository:
#   MLFLOW_BACKEND_STORE_URI        postgresql://USER:PASSWORD@HOST:5432/mlflow   (runs, metrics)
#   MLFLOW_AUTH_DATABASE_URI        postgresql://USER:PASSWORD@HOST:5432/mlflow_auth (users)
#   MLFLOW_ARTIFACTS_DESTINATION    s3://BUCKET/PREFIX, proxied by the server (--serve-artifacts)
#   MLFLOW_AUTH_ADMIN_USERNAME / MLFLOW_AUTH_ADMIN_PASSWORD   admin created on the first start
#   MLFLOW_FLASK_SERVER_SECRET_KEY  CSRF key, required by the basic-auth app
#   MLFLOW_SERVER_ALLOWED_HOSTS     optional, Host headers accepted (default: localhost, private IPs)
# S3 access comes from the AWS credential chain (instance profile or IRSA), never from a file.
set -euo pipefail
: "${MLFLOW_BACKEND_STORE_URI:?}" "${MLFLOW_AUTH_DATABASE_URI:?}" "${MLFLOW_ARTIFACTS_DESTINATION:?}"
: "${MLFLOW_AUTH_ADMIN_USERNAME:?}" "${MLFLOW_AUTH_ADMIN_PASSWORD:?}"
: "${MLFLOW_FLASK_SERVER_SECRET_KEY:?}"

# The basic-auth app reads its own settings from an ini file (MLFLOW_AUTH_CONFIG_PATH). It holds
# the auth database URI, so it is written at start into a private temporary directory; '%' is
# doubled because the file is read with configparser's interpolation.
config_dir="$(mktemp -d)"
umask 077
export MLFLOW_AUTH_CONFIG_PATH="${config_dir}/basic_auth.ini"
cat > "${MLFLOW_AUTH_CONFIG_PATH}" <<INI
[mlflow]
default_permission = ${MLFLOW_AUTH_DEFAULT_PERMISSION:-READ}
database_uri = ${MLFLOW_AUTH_DATABASE_URI//%/%%}
authorization_function = mlflow.server.auth:authenticate_request_basic_auth
INI

# 0.0.0.0 inside the container only: compose publishes the port on one host address (127.0.0.1
# by default) and Kubernetes exposes it through a ClusterIP Service.
exec mlflow server --app-name basic-auth --host 0.0.0.0 --port 5000 \
    --workers "${MLFLOW_WORKERS:-2}" "$@"
