#!/usr/bin/env bash
# Starts `mlflow server --app-name linc-auth` (MLflow 3.17's basic-auth app with linc's landing
# page, orchestration/tracking/ui_app.py) over HTTPS, from environment variables and mounted
# files only, so that compose and Kubernetes inject every secret from outside the image:
#   MLFLOW_BACKEND_STORE_URI        postgresql+psycopg2://USER:PASSWORD@HOST:5432/mlflow   (runs, metrics)
#   MLFLOW_AUTH_DATABASE_URI        postgresql+psycopg2://USER:PASSWORD@HOST:5432/mlflow_auth (users)
#   MLFLOW_ARTIFACTS_DESTINATION    s3://BUCKET/PREFIX, proxied by the server (--serve-artifacts)
#   MLFLOW_AUTH_ADMIN_USERNAME / MLFLOW_AUTH_ADMIN_PASSWORD   admin created on the first start
#   MLFLOW_FLASK_SERVER_SECRET_KEY  CSRF key, required by the basic-auth app
#   MLFLOW_TLS_CERT_FILE / MLFLOW_TLS_KEY_FILE  the server's certificate (chain) and key, PEM
#                                   (default /etc/linc-mlflow/tls/tls.crt and tls.key)
#   MLFLOW_SERVER_ALLOWED_HOSTS     optional, Host headers accepted (default: localhost, private IPs)
#   MLFLOW_HOST / MLFLOW_PORT       optional, default 0.0.0.0 (inside the container) and 5000
# S3 access comes from the AWS credential chain (instance profile or IRSA), never from a file.
set -euo pipefail
: "${MLFLOW_BACKEND_STORE_URI:?}" "${MLFLOW_AUTH_DATABASE_URI:?}" "${MLFLOW_ARTIFACTS_DESTINATION:?}"
: "${MLFLOW_AUTH_ADMIN_USERNAME:?}" "${MLFLOW_AUTH_ADMIN_PASSWORD:?}"
: "${MLFLOW_FLASK_SERVER_SECRET_KEY:?}"

# TLS is terminated by the server itself (uvicorn), so that the basic-auth passwords of people
# and trials never cross a network in clear; there is no plain-HTTP listener.
tls_cert="${MLFLOW_TLS_CERT_FILE:-/etc/linc-mlflow/tls/tls.crt}"
tls_key="${MLFLOW_TLS_KEY_FILE:-/etc/linc-mlflow/tls/tls.key}"
for file in "${tls_cert}" "${tls_key}"; do
  if [ ! -r "${file}" ]; then
    echo "linc-mlflow-server: cannot read the TLS file ${file} (mount the certificate and key: infra/README.md, Hardening)" >&2
    exit 2
  fi
done

# The basic-auth app reads its settings from an ini file (MLFLOW_AUTH_CONFIG_PATH): the shipped
# one (default_permission = NO_PERMISSIONS) plus the auth database URI, which holds a password and
# is therefore written at start into a private temporary directory; '%' is doubled because the
# file is read with configparser's interpolation.
template="${LINC_MLFLOW_AUTH_INI:-/etc/linc-mlflow/basic_auth.ini}"
umask 077
config_dir="$(mktemp -d)"
export MLFLOW_AUTH_CONFIG_PATH="${config_dir}/basic_auth.ini"
{
  cat "${template}"
  printf 'database_uri = %s\n' "${MLFLOW_AUTH_DATABASE_URI//%/%%}"
} > "${MLFLOW_AUTH_CONFIG_PATH}"

# MLflow's job runner (GenAI scorers, trace rollups; linc uses none) calls this server back over
# plain http:// and gets its gateway token only for `--app-name basic-auth`: off unless asked for.
export MLFLOW_SERVER_ENABLE_JOB_EXECUTION="${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:-false}"

# The user store and the admin, once, before the workers start (what `mlflow server` does for
# `--app-name basic-auth` only): a bad admin password ends here in one error instead of in
# workers that the server restarts for ever.
python -c 'from mlflow.server.auth import bootstrap_admin_user, get_flask_server_secret_key
get_flask_server_secret_key(); bootstrap_admin_user()'

# 0.0.0.0 inside the container only: compose publishes the port on one host address (127.0.0.1
# by default) and Kubernetes exposes it through a ClusterIP Service behind a NetworkPolicy.
exec mlflow server --app-name linc-auth \
    --host "${MLFLOW_HOST:-0.0.0.0}" --port "${MLFLOW_PORT:-5000}" \
    --workers "${MLFLOW_WORKERS:-2}" \
    --uvicorn-opts "--ssl-certfile '${tls_cert}' --ssl-keyfile '${tls_key}'" "$@"
