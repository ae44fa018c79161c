# Shared by scripts/test and scripts/bench: throwaway database servers for the tests and
# benchmarks. Source it from bash after `set -euo pipefail`; servers are stopped on exit.

# each step with the seconds since the script began, so a slow CI run shows which step grew
log() { printf '\n==> [%ss] %s\n' "$SECONDS" "$*"; }

work=$(mktemp -d "${TMPDIR:-/tmp}/backstop-test.XXXXXX")
cleanups=()
cleanup() {
  local i
  # each stop in a subshell of its own: one that loops on a variable of its own (the
  # Galera nodes' wait on `i`) must not move this loop on and skip the others
  for ((i = ${#cleanups[@]} - 1; i >= 0; i--)); do (eval "${cleanups[i]}") || true; done
  rm -rf "$work"
}
trap cleanup EXIT

require() {
  if [ -z "${BACKSTOP_TEST_REQUIRE:-}" ]; then
    BACKSTOP_TEST_REQUIRE="$1"
  else
    BACKSTOP_TEST_REQUIRE="$BACKSTOP_TEST_REQUIRE,$1"
  fi
  export BACKSTOP_TEST_REQUIRE
}

# A free TCP port on 127.0.0.1.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# Install Debian packages without starting their services (a policy-rc.d that refuses
# every start, removed again unless it was there before).
apt_install() {
  local made_policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    made_policy=1
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  [ -n "$made_policy" ] && rm -f /usr/sbin/policy-rc.d
  return 0
}

# Run a command as the unprivileged `postgres` user when we are root (initdb and
# postgres refuse to run as root).
as_pg() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

# A throwaway certificate authority for the TLS tests: ca.pem signs server.pem (for
# localhost and 127.0.0.1); other-ca.pem signs nothing here (the "wrong CA" case).
# Exports BACKSTOP_TEST_TLS_CA and BACKSTOP_TEST_TLS_OTHER_CA.
make_test_ca() {
  local d="$work/tls"
  if [ ! -f "$d/server.pem" ]; then
    command -v openssl >/dev/null 2>&1 || apt_install openssl
    mkdir -p "$d"
    local ca_ext=(-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign")
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=backstop test CA" "${ca_ext[@]}" \
      -keyout "$d/ca.key" -out "$d/ca.pem" 2>/dev/null
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=some other CA" "${ca_ext[@]}" \
      -keyout "$d/other-ca.key" -out "$d/other-ca.pem" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
      -keyout "$d/server.key" -out "$d/server.csr" 2>/dev/null
    printf '%s\n' "subjectAltName=DNS:localhost,IP:127.0.0.1" "basicConstraints=CA:FALSE" \
      "keyUsage=digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth" >"$d/server.ext"
    openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial \
      -days 2 -extfile "$d/server.ext" -out "$d/server.pem" 2>/dev/null
    chmod 755 "$d"
    chmod 644 "$d"/*.pem
  fi
  export BACKSTOP_TEST_TLS_CA="$d/ca.pem"
  export BACKSTOP_TEST_TLS_OTHER_CA="$d/other-ca.pem"
}

# The server's certificate and key in `dir`, owned by `owner` (a server refuses a key
# others can read).
install_server_cert() {
  local dir=$1 owner=$2
  cp "$work/tls/server.pem" "$work/tls/ca.pem" "$dir/"
  install -m 600 "$work/tls/server.key" "$dir/server.key"
  if [ "$(id -u)" = 0 ]; then chown "$owner" "$dir/server.key" "$dir/server.pem" "$dir/ca.pem"; fi
}

# The directory holding initdb / pg_ctl, installing Debian's postgresql when missing.
pg_bindir() {
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$d" ] && command -v initdb >/dev/null 2>&1; then
    d=$(dirname "$(readlink -f "$(command -v initdb)")")
  fi
  if [ -z "$d" ] || [ ! -x "$d/initdb" ]; then
    log "installing postgresql (Debian package)" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    d=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  fi
  printf '%s\n' "$d"
}

# A throwaway PostgreSQL: initdb into a temp dir, a free port on 127.0.0.1, stopped on
# exit. Skipped when BACKSTOP_TEST_POSTGRES_URL is already set (your own server).
start_postgres() {
  if [ -n "${BACKSTOP_TEST_POSTGRES_URL:-}" ]; then
    log "using PostgreSQL at BACKSTOP_TEST_POSTGRES_URL"
    require postgres
    return
  fi
  local bin dir port
  bin=$(pg_bindir)
  if [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
    useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
  fi
  dir="$work/pg"
  mkdir -p "$dir"
  chmod 755 "$work"
  [ "$(id -u)" = 0 ] && chown postgres "$dir"
  as_pg "$bin/initdb" -D "$dir/data" -U backstop --auth=trust -E UTF8 --no-locale >"$work/pg-initdb.log" 2>&1 \
    || { cat "$work/pg-initdb.log"; return 1; }
  # TLS: the server offers it; the user backstop_tls may connect only through it
  make_test_ca
  install_server_cert "$dir" postgres
  { printf '%s\n' "hostssl all backstop_tls 127.0.0.1/32 trust" "host all backstop_tls 127.0.0.1/32 reject"
    cat "$dir/data/pg_hba.conf"; } >"$dir/pg_hba.conf"
  cp "$dir/pg_hba.conf" "$dir/data/pg_hba.conf"
  port=$(free_port)
  log "starting PostgreSQL ($("$bin/postgres" --version)) on 127.0.0.1:$port"
  # durability off (fsync, synchronous commit) for the tests' speed, unless BACKSTOP_DURABLE=1
  local durability="-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
  [ "${BACKSTOP_DURABLE:-}" = 1 ] && durability=
  pg_opts="-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=400 -c ssl=on -c ssl_cert_file=$dir/server.pem -c ssl_key_file=$dir/server.key"
  as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 -o "$pg_opts $durability" \
    start >/dev/null || { cat "$dir/server.log"; return 1; }
  cleanups+=("as_pg '$bin/pg_ctl' -D '$dir/data' -m immediate stop >/dev/null 2>&1")
  export BACKSTOP_TEST_POSTGRES_URL="postgres://backstop@127.0.0.1:$port/postgres"
  # an immediate restart (a crash and a recovery), for the chaos suite
  local run_as=
  [ "$(id -u)" = 0 ] && run_as="runuser -u postgres --"
  printf '%s\n' "#!/bin/sh" \
    "exec $run_as '$bin/pg_ctl' -D '$dir/data' -l '$dir/server.log' -m immediate -w -t 60 restart >/dev/null" \
    >"$dir/restart.sh"
  chmod +x "$dir/restart.sh"
  export BACKSTOP_TEST_POSTGRES_RESTART="$dir/restart.sh"
  pg_port=$port
  require postgres
  "$bin/psql" -q -h 127.0.0.1 -p "$port" -U backstop -d postgres \
    -c "CREATE ROLE backstop_tls LOGIN SUPERUSER" >/dev/null
  export BACKSTOP_TEST_POSTGRES_TLS_URL="postgres://backstop_tls@127.0.0.1:$port/postgres?sslmode=verify-full&sslrootcert=$BACKSTOP_TEST_TLS_CA"
  require postgres-tls
}

# A streaming standby of the throwaway PostgreSQL (pg_basebackup -R), on a free port,
# stopped on exit. Exports BACKSTOP_TEST_POSTGRES_FAILOVER_URL: both servers in one URL,
# the standby first, with target_session_attrs=read-write (a connection passes over the
# standby and lands on the primary, as after a failover it lands on the promoted one),
# and BACKSTOP_TEST_POSTGRES_PAIR: scripts/pg-pair, which starts, crashes and promotes
# private pairs.
# Skipped with your own PostgreSQL, unless BACKSTOP_TEST_POSTGRES_FAILOVER_URL is set.
start_pg_standby() {
  if [ -n "${BACKSTOP_TEST_POSTGRES_FAILOVER_URL:-}" ]; then
    log "using the PostgreSQL pair at BACKSTOP_TEST_POSTGRES_FAILOVER_URL"
    require postgres-failover
    return
  fi
  if [ -z "${pg_port:-}" ]; then
    log "no standby: PostgreSQL is your own (set BACKSTOP_TEST_POSTGRES_FAILOVER_URL for a pair)"
    return
  fi
  local bin dir port i
  bin=$(pg_bindir)
  dir="$work/pg-standby"
  mkdir -p "$dir"
  [ "$(id -u)" = 0 ] && chown postgres "$dir"
  as_pg "$bin/pg_basebackup" -h 127.0.0.1 -p "$pg_port" -U backstop -D "$dir/data" -R \
    -X stream >"$dir/basebackup.log" 2>&1 || { cat "$dir/basebackup.log"; return 1; }
  port=$(free_port)
  log "starting a streaming standby of PostgreSQL on 127.0.0.1:$port"
  as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=400 -c ssl=off" \
    start >/dev/null || { cat "$dir/server.log"; return 1; }
  cleanups+=("as_pg '$bin/pg_ctl' -D '$dir/data' -m immediate stop >/dev/null 2>&1")
  for i in $(seq 1 100); do
    [ "$("$bin/psql" -qAt -h 127.0.0.1 -p "$port" -U backstop -d postgres \
      -c "SELECT status FROM pg_stat_wal_receiver" 2>/dev/null)" = streaming ] && break
    sleep 0.1
  done
  export BACKSTOP_TEST_POSTGRES_FAILOVER_URL="postgres://backstop@127.0.0.1:$port,127.0.0.1:$pg_port/postgres?target_session_attrs=read-write"
  # the promotion cases (backend-postgres/tests/failover.rs) start private pairs with it
  export BACKSTOP_TEST_POSTGRES_PAIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/pg-pair"
  require postgres-failover
}

# PgBouncer in transaction pooling mode in front of the throwaway PostgreSQL (Debian's
# pgbouncer, installed when missing), stopped on exit: the store's and engine's cases
# run through it. Skipped with your own PostgreSQL, unless BACKSTOP_TEST_PGBOUNCER_URL
# names your own PgBouncer.
start_pgbouncer() {
  if [ -n "${BACKSTOP_TEST_PGBOUNCER_URL:-}" ]; then
    log "using PgBouncer at BACKSTOP_TEST_PGBOUNCER_URL"
    require pgbouncer
    return
  fi
  if [ -z "${pg_port:-}" ]; then
    log "no PgBouncer: PostgreSQL is your own (set BACKSTOP_TEST_PGBOUNCER_URL for yours)"
    return
  fi
  local dir port i bin
  bin=$(command -v pgbouncer || ls /usr/sbin/pgbouncer 2>/dev/null || true)
  if [ -z "$bin" ]; then
    log "installing pgbouncer (Debian package)"
    apt_install pgbouncer
    bin=/usr/sbin/pgbouncer
  fi
  dir="$work/pgbouncer"
  mkdir -p "$dir"
  port=$(free_port)
  cat >"$dir/pgbouncer.ini" <<EOF
[databases]
* = host=127.0.0.1 port=$pg_port
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/users.txt
pool_mode = transaction
max_client_conn = 2000
default_pool_size = 60
ignore_startup_parameters = extra_float_digits,options
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
EOF
  echo '"backstop" ""' >"$dir/users.txt"
  [ "$(id -u)" = 0 ] && chown -R postgres "$dir"
  log "starting PgBouncer ($("$bin" --version | head -1), transaction pooling) on 127.0.0.1:$port"
  as_pg "$bin" -d "$dir/pgbouncer.ini" || { cat "$dir/pgbouncer.log"; return 1; }
  cleanups+=("kill \$(cat '$dir/pgbouncer.pid') 2>/dev/null")
  for i in $(seq 1 50); do
    "$(pg_bindir)/psql" -q -h 127.0.0.1 -p "$port" -U backstop -d postgres -c 'SELECT 1' >/dev/null 2>&1 && break
    sleep 0.1
  done
  "$(pg_bindir)/psql" -q -h 127.0.0.1 -p "$port" -U backstop -d postgres -c 'SELECT 1' >/dev/null \
    || { cat "$dir/pgbouncer.log"; return 1; }
  export BACKSTOP_TEST_PGBOUNCER_URL="postgres://backstop@127.0.0.1:$port/postgres"
  require pgbouncer
}

# Durability on, as production runs, on the servers already started (the chaos suite's
# crashes must not lose what was acknowledged): PostgreSQL restarted with its defaults
# (fsync, synchronous commit, full-page writes; its restarts keep them) and MariaDB's
# flush of the log at every commit (until its next restart, after which the log still
# reaches the OS at every commit, which a crash of the server does not lose). Servers
# started with BACKSTOP_DURABLE=1 are durable from the start.
make_durable() {
  if [ -n "${pg_opts:-}" ]; then
    as_pg "$(pg_bindir)/pg_ctl" -D "$work/pg/data" -l "$work/pg/server.log" -w -t 60 -m fast \
      -o "$pg_opts" restart >/dev/null
  fi
  if [ -n "${mysql_sock:-}" ]; then
    mariadb --no-defaults -S "$mysql_sock" -u root -e "SET GLOBAL innodb_flush_log_at_trx_commit = 1"
  fi
}

# A throwaway MariaDB (the MySQL backend's CI server): mariadb-install-db into a temp
# dir, a free port on 127.0.0.1, stopped on exit. Installs Debian's mariadb-server when
# missing. Skipped when BACKSTOP_TEST_MYSQL_URL is already set (your own server).
start_mysql() {
  if [ -n "${BACKSTOP_TEST_MYSQL_URL:-}" ]; then
    log "using MySQL at BACKSTOP_TEST_MYSQL_URL"
    require mysql
    return
  fi
  local dir port i user_opt=()
  if [ ! -x /usr/sbin/mariadbd ] || ! command -v mariadb-install-db >/dev/null 2>&1; then
    log "installing mariadb-server (Debian package)"
    apt_install mariadb-server
  fi
  dir="$work/mysql"
  mkdir -p "$dir"
  chmod 755 "$work"
  if [ "$(id -u)" = 0 ]; then
    id mysql >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin mysql
    chown mysql "$dir"
    user_opt=(--user=mysql)
  fi
  mariadb-install-db --no-defaults --datadir="$dir/data" "${user_opt[@]}" \
    --auth-root-authentication-method=normal --skip-test-db >"$dir/install.log" 2>&1 \
    || { cat "$dir/install.log"; return 1; }
  # TLS: the server offers it; the user backstop_tls may connect only through it
  make_test_ca
  install_server_cert "$dir" mysql
  port=$(free_port)
  log "starting MariaDB ($(/usr/sbin/mariadbd --version | cut -d' ' -f4)) on 127.0.0.1:$port"
  # the log written to the OS at each commit (a crash of the server loses nothing, one of
  # the host may) for the tests' speed; flushed at each commit with BACKSTOP_DURABLE=1
  local flush=2
  [ "${BACKSTOP_DURABLE:-}" = 1 ] && flush=1
  local server=(/usr/sbin/mariadbd --no-defaults --datadir="$dir/data" "${user_opt[@]}" --port="$port"
    --bind-address=127.0.0.1 --socket="$dir/sock" --pid-file="$dir/pid" --skip-name-resolve
    --max-connections=800 --innodb-flush-log-at-trx-commit=$flush --innodb-buffer-pool-size=256M
    --skip-log-bin --ssl-ca="$dir/ca.pem" --ssl-cert="$dir/server.pem" --ssl-key="$dir/server.key")
  "${server[@]}" >"$dir/server.log" 2>&1 &
  disown  # the chaos suite kills it (restart.sh): no job notice from this shell
  # an immediate restart (kill -9, then crash recovery at start), for the chaos suite
  { echo '#!/usr/bin/env bash'
    echo 'set -u'
    printf 'pid=$(cat %q); kill -9 "$pid"\n' "$dir/pid"
    echo 'while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done'
    printf 'setsid %s >>%q 2>&1 </dev/null &\n' "$(printf '%q ' "${server[@]}")" "$dir/server.log"
    printf 'for i in $(seq 1 600); do mariadb-admin --no-defaults -S %q -u root ping >/dev/null 2>&1 && exit 0; sleep 0.1; done\n' "$dir/sock"
    echo 'echo "MariaDB did not come back" >&2; exit 1'
  } >"$dir/restart.sh"
  chmod +x "$dir/restart.sh"
  export BACKSTOP_TEST_MYSQL_RESTART="$dir/restart.sh"
  cleanups+=("mariadb-admin --no-defaults -S '$dir/sock' -u root shutdown >/dev/null 2>&1 || kill \$(cat '$dir/pid') 2>/dev/null")
  for i in $(seq 1 120); do
    mariadb-admin --no-defaults -S "$dir/sock" -u root ping >/dev/null 2>&1 && break
    sleep 0.5
  done
  mariadb --no-defaults -S "$dir/sock" -u root -e \
    "CREATE USER 'backstop'@'%' IDENTIFIED BY 'backstop'; GRANT ALL ON *.* TO 'backstop'@'%'; CREATE DATABASE backstop;
     CREATE USER 'backstop_tls'@'%' IDENTIFIED BY 'backstop' REQUIRE SSL; GRANT ALL ON *.* TO 'backstop_tls'@'%';" \
    || { cat "$dir/server.log"; return 1; }
  export BACKSTOP_TEST_MYSQL_URL="mysql://backstop:backstop@127.0.0.1:$port"
  mysql_sock="$dir/sock"
  export BACKSTOP_EXAMPLE_MYSQL_URL="$BACKSTOP_TEST_MYSQL_URL/backstop"
  require mysql
  export BACKSTOP_TEST_MYSQL_TLS_URL="mysql://backstop_tls:backstop@127.0.0.1:$port?ssl-mode=VERIFY_IDENTITY&ssl-ca=$BACKSTOP_TEST_TLS_CA"
  require mysql-tls
}


# A throwaway Redis: no persistence, a free port on 127.0.0.1, stopped on exit. Installs
# Debian's redis-server when missing. Skipped when BACKSTOP_TEST_REDIS_URL is already set
# (your own server). Tests that restart Redis on purpose run the same binary on the same
# port, and the Sentinel cases (redis/tests/sentinel.rs) run a private master, replica
# and three Sentinels from it (`--sentinel`: Debian's redis-sentinel is this binary):
# BACKSTOP_TEST_REDIS_SERVER names it (empty with your own server: those cases then skip
# with a printed reason unless redis is required).
start_redis() {
  if [ -n "${BACKSTOP_TEST_REDIS_URL:-}" ]; then
    log "using Redis at BACKSTOP_TEST_REDIS_URL"
    require redis
    return
  fi
  if ! command -v redis-server >/dev/null 2>&1; then
    log "installing redis-server (Debian package)"
    apt_install redis-server
  fi
  local dir port i
  dir="$work/redis"
  mkdir -p "$dir"
  port=$(free_port)
  # TLS on a second port, with the test CA's certificate (clients not asked for one)
  local tls_port
  tls_port=$(free_port)
  make_test_ca
  install_server_cert "$dir" root
  log "starting Redis ($(redis-server --version | cut -d' ' -f3)) on 127.0.0.1:$port, TLS on $tls_port"
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --tls-port "$tls_port" --tls-cert-file "$dir/server.pem" --tls-key-file "$dir/server.key" \
    --tls-ca-cert-file "$dir/ca.pem" --tls-auth-clients no \
    --dir "$dir" --daemonize no >"$dir/server.log" 2>&1 &
  echo $! >"$dir/pid"
  # the pid file names the current server: a test that restarts Redis rewrites it
  cleanups+=("redis-cli -p $port shutdown nosave >/dev/null 2>&1 || true")
  for i in $(seq 1 100); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    sleep 0.1
  done
  redis-cli -p "$port" ping >/dev/null || { cat "$dir/server.log"; return 1; }
  export BACKSTOP_TEST_REDIS_URL="redis://127.0.0.1:$port"
  export BACKSTOP_TEST_REDIS_SERVER="$(command -v redis-server)"
  require redis
  export BACKSTOP_TEST_REDIS_TLS_URL="rediss://127.0.0.1:$tls_port/?sslrootcert=$BACKSTOP_TEST_TLS_CA"
  require redis-tls
}

# Debian's headless Chromium and its WebDriver, for the console's browser test
# (cli/tests/browser.rs), installed when missing; `browser` becomes required.
start_browser() {
  if ! command -v chromedriver >/dev/null 2>&1 || ! command -v chromium >/dev/null 2>&1; then
    log "installing chromium and chromium-driver (Debian packages)"
    apt_install chromium chromium-driver
  fi
  log "browser: $(chromium --version 2>/dev/null | head -n 1), $(chromedriver --version | cut -d' ' -f1-2)"
  require browser
}

# promtool (Debian's prometheus package, installed when missing; no service is started),
# to check and unit-test the alerting rules in deploy/prometheus.
install_promtool() {
  if ! command -v promtool >/dev/null 2>&1; then
    log "installing prometheus (Debian package) for promtool"
    apt_install --no-install-recommends prometheus
  fi
}

# A throwaway 3-node MariaDB Galera Cluster on localhost (Debian's galera-4, rsync state
# transfers), stopped on exit. Node 1 bootstraps the cluster; nodes 2 and 3 join it and
# each is waited for until it reports Synced. Exports BACKSTOP_TEST_GALERA_URL, one URL
# naming the three nodes (`mysql://user:pass@host1:port1,host2:port2,host3:port3`), and
# BACKSTOP_TEST_GALERA_DIR (node n's socket, pid, log and restart.sh — kill -9, start
# again, wait for Synced — in n$n/). Skipped when
# BACKSTOP_TEST_GALERA_URL is already set (your own cluster).
#
# Nodes stop with kill -9: a clean shutdown of a node that served a long write-heavy run
# was seen growing to 24 GB resident inside InnoDB's shutdown. Their allocator is
# jemalloc (glibc's arenas kept gigabytes the server had freed).
start_galera() {
  if [ -n "${BACKSTOP_TEST_GALERA_URL:-}" ]; then
    log "using the Galera cluster at BACKSTOP_TEST_GALERA_URL"
    require galera
    return
  fi
  local g="$work/galera" n i addr="" hosts="" user_opt=() jemalloc
  if [ ! -e /usr/lib/galera/libgalera_smm.so ] || ! command -v rsync >/dev/null 2>&1 \
    || [ ! -x /usr/sbin/mariadbd ] || ! ls /usr/lib/*/libjemalloc.so.2 >/dev/null 2>&1; then
    log "installing galera-4, rsync, libjemalloc2 and mariadb-server (Debian packages)"
    apt_install galera-4 rsync libjemalloc2 mariadb-server
  fi
  jemalloc=$(ls /usr/lib/*/libjemalloc.so.2 | head -n 1)
  [ "${BACKSTOP_GALERA_MALLOC:-}" = glibc ] && jemalloc=
  mkdir -p "$g"
  chmod 755 "$work"
  if [ "$(id -u)" = 0 ]; then
    id mysql >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin mysql
    user_opt=(--user=mysql)
  fi
  local -a port gcomm ist sst
  for n in 1 2 3; do
    port[n]=$(free_port) gcomm[n]=$(free_port) ist[n]=$(free_port) sst[n]=$(free_port)
    addr="$addr${addr:+,}127.0.0.1:${gcomm[n]}"
    hosts="$hosts${hosts:+,}127.0.0.1:${port[n]}"
  done
  local flush=2
  [ "${BACKSTOP_DURABLE:-}" = 1 ] && flush=1
  # each node's memory cap (MB), enforced through a cgroup (v1) under this shell's own
  # when it can be made; BACKSTOP_TEST_GALERA_DIR/n*/ then has its peak
  galera_node_mb=${BACKSTOP_GALERA_NODE_MB:-3072}
  galera_cgroup=""
  local mine
  mine=$(awk -F: '$2 == "memory" {print $3}' /proc/self/cgroup 2>/dev/null)
  if [ -n "$mine" ] && [ -w "/sys/fs/cgroup/memory$mine" ]; then
    galera_cgroup="/sys/fs/cgroup/memory$mine/backstop-galera-$$"
    mkdir -p "$galera_cgroup" 2>/dev/null || galera_cgroup=""
    [ -n "$galera_cgroup" ] && cleanups+=("rmdir '$galera_cgroup' 2>/dev/null")
  fi
  [ -z "$galera_cgroup" ] && log "no memory cgroup for the Galera nodes: their memory is not capped"
  galera_node() {
    local n=$1 d="$g/n$1"
    shift
    mkdir -p "$d"
    [ "$(id -u)" = 0 ] && chown mysql "$d"
    mariadb-install-db --no-defaults --datadir="$d/data" "${user_opt[@]}" \
      --auth-root-authentication-method=normal --skip-test-db >"$d/install.log" 2>&1 \
      || { cat "$d/install.log"; return 1; }
    # in a memory cgroup of its own where the host allows one: a node past its cap is
    # killed there, not the machine's other processes; its peak is read at the end
    local cg="" cap=$((galera_node_mb * 1024 * 1024))
    if [ -n "$galera_cgroup" ] && mkdir -p "$galera_cgroup/n$n" 2>/dev/null \
      && echo "$cap" >"$galera_cgroup/n$n/memory.limit_in_bytes" 2>/dev/null; then
      cg="$galera_cgroup/n$n/cgroup.procs"
      cleanups+=("rmdir '$galera_cgroup/n$n' 2>/dev/null")
    fi
    # the node's command (without the bootstrap's --wsrep-new-cluster: a node started
    # again joins the others), in its memory cgroup when it has one
    local -a server=(env ${jemalloc:+LD_PRELOAD="$jemalloc"} /usr/sbin/mariadbd --no-defaults
      --datadir="$d/data" "${user_opt[@]}"
      --port="${port[n]}" --bind-address=127.0.0.1 --socket="$d/sock" --pid-file="$d/pid"
      --skip-name-resolve --max-connections=400 --innodb-flush-log-at-trx-commit=$flush
      --innodb-buffer-pool-size=128M --binlog-format=ROW --innodb-autoinc-lock-mode=2
      --wsrep-on=ON --wsrep-provider=/usr/lib/galera/libgalera_smm.so --wsrep-cluster-name=backstop
      --wsrep-node-name="n$n" --wsrep-cluster-address="gcomm://$addr"
      --wsrep-node-address="127.0.0.1:${gcomm[n]}" --wsrep-sst-method=rsync
      --wsrep-sst-receive-address="127.0.0.1:${sst[n]}"
      --wsrep-provider-options="gmcast.listen_addr=tcp://127.0.0.1:${gcomm[n]};ist.recv_addr=127.0.0.1:${ist[n]};gcache.size=64M")
    # shellcheck disable=SC2016
    local in_cgroup='[ -z "$1" ] || echo $$ >"$1"; shift; exec "$@"'
    sh -c "$in_cgroup" - "$cg" "${server[@]}" "$@" >"$d/server.log" 2>&1 &
    disown
    # the chaos suite's node fault: kill -9, then the node started again, rejoining the
    # cluster, and waited for until it reports Synced. As the packaged service does
    # (galera_recovery): a killed node's grastate.dat says seqno -1, so its position is
    # first recovered from InnoDB (--wsrep-recover) and handed to the start
    # (--wsrep-start-position), which then asks a donor for IST from its gcache; started
    # without it the node knows no position and takes a whole rsync SST
    { echo '#!/usr/bin/env bash'
      echo 'set -u'
      printf 'pid=$(cat %q); kill -9 "$pid" 2>/dev/null\n' "$d/pid"
      echo 'while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done'
      printf 'rm -f %q; %s --wsrep-recover --log-error=%q >/dev/null 2>&1\n' "$d/recover.log" "$(printf '%q ' "${server[@]}")" "$d/recover.log"
      printf 'pos=$(grep -o "WSREP: Recovered position: [^ ]*" %q | tail -n 1 | cut -d" " -f4)\n' "$d/recover.log"
      printf 'setsid sh -c %q - %q %s ${pos:+--wsrep-start-position=$pos} >>%q 2>&1 </dev/null &\n' "$in_cgroup" "$cg" "$(printf '%q ' "${server[@]}")" "$d/server.log"
      printf 'for i in $(seq 1 1200); do [ "$(mariadb --no-defaults -S %q -u root -N -e "SHOW STATUS LIKE '"'"'wsrep_local_state_comment'"'"'" 2>/dev/null | cut -f2)" = Synced ] && exit 0; sleep 0.1; done\n' "$d/sock"
      echo 'echo "the Galera node did not come back Synced" >&2; exit 1'
    } >"$d/restart.sh"
    chmod +x "$d/restart.sh"
    cleanups+=("p=\$(cat '$d/pid' 2>/dev/null) && kill -9 \$p 2>/dev/null; for i in \$(seq 50); do kill -0 \$p 2>/dev/null || break; sleep 0.1; done")
    for i in $(seq 1 600); do
      [ "$(mariadb --no-defaults -S "$d/sock" -u root -N -e "SHOW STATUS LIKE 'wsrep_local_state_comment'" 2>/dev/null | cut -f2)" = Synced ] \
        && return 0
      sleep 0.2
    done
    echo "Galera node $n did not reach Synced"
    tail -n 40 "$d/server.log"
    return 1
  }
  log "starting a 3-node Galera cluster ($(/usr/sbin/mariadbd --version | cut -d' ' -f4)) on 127.0.0.1:${port[1]},${port[2]},${port[3]}"
  galera_node 1 --wsrep-new-cluster || return 1
  mariadb --no-defaults -S "$g/n1/sock" -u root -e \
    "CREATE USER 'backstop'@'%' IDENTIFIED BY 'backstop'; GRANT ALL ON *.* TO 'backstop'@'%';"
  galera_node 2 || return 1
  galera_node 3 || return 1
  export BACKSTOP_TEST_GALERA_URL="mysql://backstop:backstop@$hosts"
  export BACKSTOP_TEST_GALERA_DIR="$g"
  export BACKSTOP_TEST_GALERA_CGROUP="$galera_cgroup"
  require galera
}
