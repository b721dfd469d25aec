#!/usr/bin/env bash
# A real Keystone (30.0.0, fernet) for tests, from the venv that
# scripts/setup-env.sh caches: its database in SQLite (DIR/keystone.db), or
# where KEYSTONE_DATABASE names (an empty database, e.g.
# mysql+pymysql://root@127.0.0.1:3306/NAME: the run's shared Keystone, whose
# writers are many processes at once, which SQLite refuses with "database is
# locked").
#   scripts/keystone.sh start DIR PORT   # prints KEYSTONE_URL=... when /v3 answers
#   scripts/keystone.sh stop DIR
# Bootstrap: domain default, project+user admin (password in DIR/admin-password),
# system-scoped admin role, identity endpoints http://127.0.0.1:PORT/v3.
set -euo pipefail
cmd="${1:?start|stop}" dir="${2:?DIR}"
venv="${KEYSTONE_VENV:-$HOME/.cache/magnum-conductor-rs/venv-keystone-30.0.0}"
case "$cmd" in
stop)
  if [ -f "$dir/gunicorn.pid" ]; then kill -TERM "$(cat "$dir/gunicorn.pid")" 2>/dev/null || true; fi
  for _ in $(seq 1 50); do [ -f "$dir/gunicorn.pid" ] || exit 0; sleep 0.1; done
  exit 0 ;;
start) ;;
*) echo "usage: $0 start DIR PORT | stop DIR" >&2; exit 2 ;;
esac
port="${3:?PORT}"
mkdir -p "$dir/etc"
cd "$dir"
cat > etc/keystone.conf <<CONF
[DEFAULT]
log_file = $dir/keystone.log
[database]
connection = ${KEYSTONE_DATABASE:-sqlite:///$dir/keystone.db}
[token]
provider = fernet
[fernet_tokens]
key_repository = $dir/fernet-keys
[fernet_receipts]
key_repository = $dir/fernet-keys
[credential]
key_repository = $dir/credential-keys
[identity]
password_hash_rounds = 4
CONF
# Keystone's cache on, as deployments run it (openstack-ansible: memcached
# shared by its processes): here one process, the cache in its memory
# (tokens, catalog, assignments, invalidated by the process that changes
# them, which is the only one). Without it every token issued or validated
# costs ~0.13 CPU seconds, with it ~0.01 (tests/python/bench_keystone.py:
# 60 tokens issued and validated twice, 23.3 against 1.8 CPU s), and the
# run's shared Keystone was its busiest process. KEYSTONE_CACHE=0: no cache, two processes.
workers=1
if [ "${KEYSTONE_CACHE:-1}" = 1 ]; then
  printf '[cache]\nenabled = true\nbackend = dogpile.cache.memory\n' >> etc/keystone.conf
else
  workers=2
fi
# SQLite enforces foreign keys only when each connection asks, and oslo.db
# asks only when told (no configuration option does): without them a bulk
# delete (a user's application credentials go with the user) leaves the
# credentials' role rows, SQLite hands the freed internal id to the next
# credential, and its create is refused with 409 "Duplicate entry" (a flake
# the suite saw). The application is Keystone's own, with the switch
# Keystone's tests use (keystone.common.sql.core.enable_sqlite_foreign_key),
# so SQLite behaves as the MySQL of a deployment: ON DELETE CASCADE.
cat > keystone_fk_app.py <<'PY'
from keystone.common.sql import core

core.enable_sqlite_foreign_key()
from keystone.wsgi.api import application  # noqa: E402,F401
PY
# gunicorn must run without arguments: keystone parses sys.argv as its own.
# Processes, one thread each: with threads, a request could be answered
# with another request's token (an application credential created with
# the roles of a service user's token validated at the same moment:
# "Could not find role assignment with role: <admin or service>"). With
# the cache, one process, so no two disagree.
cat > gunicorn.conf.py <<CONF
wsgi_app = "keystone_fk_app:application"
pythonpath = "$dir"
bind = "127.0.0.1:$port"
workers = $workers
threads = 1
accesslog = "$dir/access.log"
# Each request's seconds (%(L)s): how long a token's validation waited
# when the run's services were loaded.
access_log_format = '%(h)s %(t)s "%(r)s" %(s)s %(L)s "%(a)s"'
errorlog = "$dir/gunicorn.err"
pidfile = "$dir/gunicorn.pid"
control_socket_disable = True
raw_env = ["OS_KEYSTONE_CONFIG_DIR=$dir/etc"]
CONF
export PYTHONWARNINGS=ignore
km() { "$venv/bin/keystone-manage" --config-file etc/keystone.conf "$@" >> manage.log 2>&1; }
password="admin-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
echo "$password" > admin-password
km db_sync
km fernet_setup --keystone-user "$(id -un)" --keystone-group "$(id -gn)"
km credential_setup --keystone-user "$(id -un)" --keystone-group "$(id -gn)"
km bootstrap --bootstrap-password "$password" --bootstrap-region-id RegionOne \
  --bootstrap-admin-url "http://127.0.0.1:$port/v3" --bootstrap-internal-url "http://127.0.0.1:$port/v3" \
  --bootstrap-public-url "http://127.0.0.1:$port/v3"
setsid "$venv/bin/gunicorn" > gunicorn.out 2>&1 < /dev/null &
for _ in $(seq 1 300); do
  if curl -sf -m 2 -o /dev/null "http://127.0.0.1:$port/v3"; then
    echo "KEYSTONE_URL=http://127.0.0.1:$port/v3"
    exit 0
  fi
  sleep 0.1
done
echo "keystone did not start; see $dir" >&2
exit 1
