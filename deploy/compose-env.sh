#!/bin/sh
# Print a fresh .env for compose.yaml: random bus passwords (one per NATS user), the two signing keys and a
# Grafana admin password.
#   deploy/compose-env.sh > .env
# nats-server reads each password as a config value, so they are letters and digits with a letter first.
set -eu
secret() { printf 'p%s' "$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')"; }
for user in GATEWAY ADJUDICATOR KVMMU ENGINE ADMIN; do
  echo "FAK_NATS_${user}_PASSWORD=$(secret)"
done
echo "FAK_VERDICT_KEY=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')"     # the adjudicator signs verdicts
echo "FAK_RELEASE_KEY=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')"     # the gateway signs Releases
echo "FAK_GRAFANA_ADMIN_PASSWORD=$(secret)"
cat <<'MORE'
# Optional (defaults in compose.yaml):
# FAK_MODEL=smollm2-135m           # pulled into the model volume by the model-pull job
# FAK_BACKEND=numba                # engine-cpu's fast CPU path
# FAK_API_KEYS=key1,key2           # gateway keys; empty: anyone who reaches :8080 may use it
# FAK_ADMIN_KEYS=ops-key           # /v1/fak/* operator endpoints
# FAK_GATEWAY_PORT=8080
MORE
