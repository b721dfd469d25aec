#!/usr/bin/env bash
# MariaDB and RabbitMQ of the demo's or the test run's own: data, sockets,
# logs and the Erlang cookie under DIR, free 127.0.0.1 ports, RabbitMQ's
# own epmd on a port of its own. The machine's own MariaDB and RabbitMQ
# (if it has any) are neither needed nor touched: nothing here reads
# /etc/mysql, /var/lib/rabbitmq or the default Erlang node.
#
#   scripts/services.sh up DIR     start both; prints as its last line
#       export MAGNUM_RS_DB_SERVER=mysql+pymysql://root@127.0.0.1:PORT
#              MAGNUM_RS_RABBITMQ_PORT=PORT MAGNUM_RS_RABBITMQ_NODE=NODE
#              MAGNUM_RS_RABBITMQ_HOME=DIR/rabbitmq
#   scripts/services.sh down DIR   stop what `up` started there, remove DIR
#   scripts/services.sh list       the databases, vhosts and each vhost's
#                                  exchanges and queues of the servers the
#                                  variables name (the machine's when unset)
#   scripts/services.sh sql STATEMENT          run it there (as the server's
#                                              administrator)
#   scripts/services.sh vhost add|delete NAME  a vhost for guest there
#
# To use servers that are running already instead, set before `up`:
#   MAGNUM_RS_DB_SERVER        an SQLAlchemy URL without a database, whose user
#                              may CREATE and DROP DATABASE
#                              (mysql+pymysql://root@127.0.0.1:3306)
#   MAGNUM_RS_RABBITMQ_PORT    the AMQP port on 127.0.0.1 (user guest/guest)
#   MAGNUM_RS_RABBITMQ_NODE    the node rabbitmqctl manages it by (rabbit@HOST)
#   MAGNUM_RS_RABBITMQ_HOME    a folder with its .erlang.cookie (unset: the
#                              rabbitmqctl on PATH, with its own cookie)
# Each one given is used as it is (and left running by `down`); the other is
# started. Needs mariadbd, mariadb-install-db and RabbitMQ's scripts
# (RABBITMQ_BIN_DIR, default /usr/lib/rabbitmq/bin): the packages
# mariadb-server and rabbitmq-server (scripts/setup-env.sh installs them;
# their system services are not used).
set -euo pipefail
usage="usage: services.sh up DIR | down DIR | list | sql STATEMENT | vhost add|delete NAME"
cmd="${1:?$usage}"
RABBITMQ_BIN_DIR="${RABBITMQ_BIN_DIR:-/usr/lib/rabbitmq/bin}"
log() { echo "[services] $*" >&2; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# Only a process still started from DIR (its command line or environment
# names it): a PID left free may be another process's by now.
ours() {  # ours PID DIR
  [ -r "/proc/$1/cmdline" ] || return 1
  tr '\0' ' ' < "/proc/$1/cmdline" | grep -qF -- "$2" && return 0
  tr '\0' '\n' 2>/dev/null < "/proc/$1/environ" | grep -qF -- "$2"
}
stop_pid() {  # stop_pid PID DIR: SIGTERM, SIGKILL after 20 s
  local p="$1"
  ours "$p" "$2" || return 0
  kill "$p" 2>/dev/null || true
  for _ in $(seq 1 80); do ours "$p" "$2" || return 0; sleep 0.25; done
  kill -9 "$p" 2>/dev/null || true
}

# `rmq ARGS...`: rabbitmqctl against the broker the variables name.
rmq() {
  if [ -n "${MAGNUM_RS_RABBITMQ_HOME:-}" ]; then
    HOME="$MAGNUM_RS_RABBITMQ_HOME" ERL_EPMD_PORT="${MAGNUM_RS_RABBITMQ_EPMD_PORT:-4369}" ERL_CRASH_DUMP_SECONDS=0 \
      "$RABBITMQ_BIN_DIR/rabbitmqctl" -n "$MAGNUM_RS_RABBITMQ_NODE" -q "$@"
  elif [ -n "${MAGNUM_RS_RABBITMQ_NODE:-}" ]; then
    rabbitmqctl -n "$MAGNUM_RS_RABBITMQ_NODE" -q "$@"
  else
    rabbitmqctl -q "$@"
  fi
}
# `sql STATEMENT`: run one statement on the server MAGNUM_RS_DB_SERVER names.
sql() {
  python3 - "${MAGNUM_RS_DB_SERVER:-mysql+pymysql://root@127.0.0.1:3306}" "$1" <<'PY'
import subprocess, sys, urllib.parse
u = urllib.parse.urlsplit(sys.argv[1])
cmd = ["mariadb", "--no-defaults", "-N", "-B", "-h", u.hostname or "127.0.0.1", "-P", str(u.port or 3306),
       "-u", urllib.parse.unquote(u.username or "root"), "-e", sys.argv[2]]
env = None
if u.password:
    import os
    env = dict(os.environ, MYSQL_PWD=urllib.parse.unquote(u.password))
sys.exit(subprocess.run(cmd, env=env).returncode)
PY
}

case "$cmd" in
sql) sql "${2:?$usage}"; exit ;;
vhost)
  name="${3:?$usage}"
  case "${2:-}" in
    add) rmq add_vhost "$name" && rmq set_permissions -p "$name" guest '.*' '.*' '.*' ;;
    delete) rmq delete_vhost "$name" ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
  exit ;;
list)
  echo "databases: $(sql 'SHOW DATABASES' | sort | tr '\n' ' ')"
  mapfile -t vhosts < <(rmq list_vhosts --no-table-headers name | sort)
  echo "vhosts: ${vhosts[*]} "
  # What a client declared in them (a service left on oslo.messaging's
  # default transport, rabbit://localhost:5672/, declares its exchanges in
  # "/"): the exchanges and queues of each vhost, by name. (A loop over an
  # array, not `while read`: rabbitmqctl reads its standard input and
  # would take the remaining vhosts' names.)
  for vhost in "${vhosts[@]}"; do
    [ -n "$vhost" ] || continue
    echo "exchanges in $vhost: $(rmq list_exchanges -p "$vhost" --no-table-headers name | sort | tr '\n' ' ')"
    echo "queues in $vhost: $(rmq list_queues -p "$vhost" --no-table-headers name | sort | tr '\n' ' ')"
  done
  exit 0 ;;
up|down) dir="${2:?$usage}" ;;
*) echo "$usage" >&2; exit 2 ;;
esac

if [ "$cmd" = down ]; then
  [ -d "$dir" ] || exit 0
  dir="$(cd "$dir" && pwd)"
  if [ -f "$dir/rabbitmq/env" ]; then
    NODE="" EPMD_PORT="" SERVER_PID=""
    # shellcheck disable=SC1091
    . "$dir/rabbitmq/env"
    HOME="$dir/rabbitmq" ERL_EPMD_PORT="$EPMD_PORT" ERL_CRASH_DUMP_SECONDS=0 timeout 30 \
      "$RABBITMQ_BIN_DIR/rabbitmqctl" -n "$NODE" -q stop >/dev/null 2>&1 || true
    [ ! -s "$dir/rabbitmq/pid" ] || stop_pid "$(cat "$dir/rabbitmq/pid")" "$dir"
    [ -z "${SERVER_PID:-}" ] || stop_pid "$SERVER_PID" "$dir"
    # The epmd it started (on its own port: the machine's is not this one).
    ERL_EPMD_PORT="$EPMD_PORT" epmd -kill >/dev/null 2>&1 || true
  fi
  if [ -s "$dir/mariadb/pid" ]; then
    stop_pid "$(cat "$dir/mariadb/pid")" "$dir"
  fi
  rm -rf "$dir"
  exit 0
fi

mkdir -p "$dir"; dir="$(cd "$dir" && pwd)"
for tool in python3 mariadbd mariadb-install-db mariadb; do
  command -v "$tool" >/dev/null || { log "$tool is missing: install the mariadb-server package (scripts/setup-env.sh does)"; exit 1; }
done
[ -x "$RABBITMQ_BIN_DIR/rabbitmq-server" ] || {
  log "$RABBITMQ_BIN_DIR/rabbitmq-server is missing: install the rabbitmq-server package (scripts/setup-env.sh does) or set RABBITMQ_BIN_DIR"
  exit 1
}

# --- MariaDB: a fresh data folder, root without a password on 127.0.0.1 only.
if [ -z "${MAGNUM_RS_DB_SERVER:-}" ]; then
  m="$dir/mariadb"
  mkdir -p "$m"
  user_opt=()
  [ "$(id -u)" != 0 ] || user_opt=(--user=root)
  mariadb-install-db --no-defaults --datadir="$m/data" --auth-root-authentication-method=normal \
    --skip-test-db "${user_opt[@]}" > "$m/install.log" 2>&1 \
    || { log "mariadb-install-db failed:"; tail -n 20 "$m/install.log" >&2; exit 1; }
  port="$(free_port)"
  # Durability traded for speed (a test server: its data is thrown away);
  # the character set as Debian's MariaDB has it.
  setsid mariadbd --no-defaults --datadir="$m/data" --socket="$m/mysqld.sock" --port="$port" \
    --bind-address=127.0.0.1 --pid-file="$m/pid" --log-error="$m/error.log" "${user_opt[@]}" \
    --skip-log-bin --skip-name-resolve --innodb-flush-log-at-trx-commit=0 --innodb-doublewrite=0 \
    --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci --max-connections=1000 \
    >/dev/null 2>&1 < /dev/null &
  MAGNUM_RS_DB_SERVER="mysql+pymysql://root@127.0.0.1:$port"
  own_db="$m"
else
  own_db=""
fi

# --- RabbitMQ: a node of its own (name, port, epmd, data and cookie), no
# plugins (no management listener to collide with another's).
r=""
if [ -z "${MAGNUM_RS_RABBITMQ_PORT:-}" ]; then
  r="$dir/rabbitmq"
  mkdir -p "$r"
  node="mc-$(head -c 4 /dev/urandom | od -An -tx1 | tr -d ' \n')@localhost"
  port="$(free_port)" dist="$(free_port)" epmd_port="$(free_port)"
  echo "[]." > "$r/enabled_plugins"
  echo "listeners.tcp.default = 127.0.0.1:$port" > "$r/rabbitmq.conf"
  (
    cd "$r"
    HOME="$r" RABBITMQ_NODENAME="$node" RABBITMQ_NODE_PORT="$port" RABBITMQ_DIST_PORT="$dist" \
      ERL_EPMD_PORT="$epmd_port" RABBITMQ_MNESIA_BASE="$r/mnesia" RABBITMQ_LOG_BASE="$r/log" \
      RABBITMQ_ENABLED_PLUGINS_FILE="$r/enabled_plugins" RABBITMQ_CONFIG_FILE="$r/rabbitmq.conf" \
      RABBITMQ_PID_FILE="$r/pid" exec setsid "$RABBITMQ_BIN_DIR/rabbitmq-server" > "$r/server.out" 2>&1 < /dev/null
  ) &
  printf 'NODE=%s\nPORT=%s\nEPMD_PORT=%s\nSERVER_PID=%s\n' "$node" "$port" "$epmd_port" "$!" > "$r/env"
  MAGNUM_RS_RABBITMQ_PORT="$port" MAGNUM_RS_RABBITMQ_NODE="$node" MAGNUM_RS_RABBITMQ_HOME="$r"
  MAGNUM_RS_RABBITMQ_EPMD_PORT="$epmd_port"
fi

# Both start at once; each is waited for in turn.
if [ -n "$own_db" ]; then
  for _ in $(seq 1 300); do sql 'SELECT 1' >/dev/null 2>&1 && break; sleep 0.1; done
  sql 'SELECT 1' >/dev/null 2>&1 || { log "MariaDB did not start ($MAGNUM_RS_DB_SERVER):"; tail -n 20 "$own_db/error.log" >&2; exit 1; }
  log "MariaDB on ${MAGNUM_RS_DB_SERVER#*@} (data: $own_db)"
else
  sql 'SELECT 1' >/dev/null 2>&1 || { log "MAGNUM_RS_DB_SERVER: cannot run a statement there"; exit 1; }
  log "MariaDB: the server MAGNUM_RS_DB_SERVER names"
fi
if [ -n "${r:-}" ]; then
  ok=""
  for _ in $(seq 1 180); do
    if rmq await_startup --timeout 10 >/dev/null 2>&1; then ok=1; break; fi
    sleep 0.5
  done
  [ -n "$ok" ] || { log "RabbitMQ node $node did not start:"; tail -n 20 "$r/server.out" >&2; exit 1; }
  log "RabbitMQ node $MAGNUM_RS_RABBITMQ_NODE on 127.0.0.1:$MAGNUM_RS_RABBITMQ_PORT (data: $r)"
else
  [ -n "${MAGNUM_RS_RABBITMQ_NODE:-}" ] || { log "MAGNUM_RS_RABBITMQ_PORT is set: set MAGNUM_RS_RABBITMQ_NODE too"; exit 1; }
  rmq await_startup --timeout 10 >/dev/null 2>&1 || { log "MAGNUM_RS_RABBITMQ_NODE=$MAGNUM_RS_RABBITMQ_NODE: rabbitmqctl cannot reach it"; exit 1; }
  log "RabbitMQ: the node MAGNUM_RS_RABBITMQ_NODE names"
fi
echo "export MAGNUM_RS_DB_SERVER=$MAGNUM_RS_DB_SERVER MAGNUM_RS_RABBITMQ_PORT=$MAGNUM_RS_RABBITMQ_PORT MAGNUM_RS_RABBITMQ_NODE=$MAGNUM_RS_RABBITMQ_NODE MAGNUM_RS_RABBITMQ_HOME=${MAGNUM_RS_RABBITMQ_HOME:-} MAGNUM_RS_RABBITMQ_EPMD_PORT=${MAGNUM_RS_RABBITMQ_EPMD_PORT:-4369}"
