#!/usr/bin/env bash
# The conductor's main job as far as it exists today: start it against the
# local RabbitMQ and drive it with Magnum 23.0.0's own client code
# (ping_conductor, a call answered with a Magnum exception, a cast), then
# stop it with SIGTERM. The Cluster API lifecycle demo comes with issue 6.
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(scripts/setup-env.sh | tail -n 1)"
cargo build --quiet -p conductor
work=$(mktemp -d)
vhost="demo-$$"
rabbitmqctl -q add_vhost "$vhost"
rabbitmqctl -q set_permissions -p "$vhost" guest '.*' '.*' '.*'
cleanup() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rabbitmqctl -q delete_vhost "$vhost" || true; rm -rf "$work"; }
trap cleanup EXIT
cat > "$work/magnum.conf" <<CONF
[DEFAULT]
transport_url = rabbit://guest:guest@127.0.0.1:5672/$vhost
rpc_response_timeout = 10
[database]
connection = sqlite:///$work/unused.sqlite
[metrics]
listen = 127.0.0.1:19323
CONF
target/debug/magnum-conductor --config-file "$work/magnum.conf" &
pid=$!
for _ in $(seq 1 100); do curl -sf localhost:19323/readyz >/dev/null 2>&1 && break; sleep 0.1; done
server=$(curl -s localhost:19323/readyz | sed 's/.*"server": "\([a-z2-7]*\)".*/\1/')
"$MAGNUM_VENV/bin/python" - "$work/magnum.conf" "$server" <<'PY'
import sys, uuid, warnings, time
warnings.simplefilter("ignore")
from magnum.common import service, exception, context
service.prepare_service(["magnum-api", "--config-file", sys.argv[1]])
from magnum.conductor import api
ctx = context.make_context(user_id="demo", project_id="demo")
print("ping_conductor ->", api.ListenerAPI(ctx, "magnum-conductor", sys.argv[2], 10).ping_conductor())
try:
    api.API(ctx).cluster_delete(str(uuid.uuid4()))
except exception.NotSupported as e:
    print("cluster_delete (call) -> NotSupported, HTTP", e.code, "-", str(e).splitlines()[0])
api.API(ctx).cluster_delete_async(str(uuid.uuid4()))
print("cluster_delete (cast) -> sent")
time.sleep(0.5)
PY
echo "--- metrics"
curl -s localhost:19323/metrics | grep -E '^magnum_conductor_rpc_messages_total'
