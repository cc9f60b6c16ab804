#!/usr/bin/env bash
# Starts and stops the fauxqs SQS emulator on loopback for the SQS adapter's
# tests.
#
#   .ci/sqs-emulator.sh start   install fauxqs@1.9.2 into .ci/fauxqs/ (once),
#                               start it on 127.0.0.1:${SWITCHYARD_SQS_PORT:-9324},
#                               wait for the port and print
#                               export SWITCHYARD_SQS_ENDPOINT=http://127.0.0.1:PORT
#   .ci/sqs-emulator.sh stop    stop the emulator started by "start"
#
# Use: eval "$(.ci/sqs-emulator.sh start)"; ...; .ci/sqs-emulator.sh stop
# Only the export line goes to stdout; progress goes to stderr.
set -euo pipefail

FAUXQS_VERSION=1.9.2
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="$here/fauxqs"
pidfile="$dir/pid"
portfile="$dir/port"
logfile="$dir/log"
port="${SWITCHYARD_SQS_PORT:-9324}"
wait_secs="${SWITCHYARD_SQS_WAIT:-30}"

log() { echo "sqs-emulator: $*" >&2; }

installed_version() {
  local pj="$dir/node_modules/fauxqs/package.json"
  [[ -f "$pj" ]] || return 0
  node -e 'process.stdout.write(JSON.parse(require("fs").readFileSync(process.argv[1],"utf8")).version)' "$pj"
}

running_pid() {
  [[ -f "$pidfile" ]] || return 1
  local pid
  pid="$(cat "$pidfile")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  # Only trust the pid if it is still our node process.
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "fauxqs-server.mjs" || return 1
  echo "$pid"
}

port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

start() {
  command -v node >/dev/null || { log "node is not installed"; exit 1; }
  command -v npm >/dev/null || { log "npm is not installed"; exit 1; }
  mkdir -p "$dir"
  if [[ "$(installed_version)" != "$FAUXQS_VERSION" ]]; then
    log "installing fauxqs@$FAUXQS_VERSION into $dir"
    npm install --prefix "$dir" --no-audit --no-fund --loglevel=error "fauxqs@$FAUXQS_VERSION" >&2
  fi
  if pid="$(running_pid)"; then
    port="$(cat "$portfile" 2>/dev/null || echo "$port")"
    log "already running on 127.0.0.1:$port (pid $pid)"
  else
    if port_open "$port"; then
      log "127.0.0.1:$port is already in use by another process"
      exit 1
    fi
    nohup node "$here/fauxqs-server.mjs" "$dir" "$port" >"$logfile" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$pidfile"
    echo "$port" >"$portfile"
    local deadline=$((SECONDS + wait_secs))
    until port_open "$port"; do
      if ! kill -0 "$pid" 2>/dev/null; then
        log "fauxqs exited during start-up; log follows"
        cat "$logfile" >&2
        rm -f "$pidfile" "$portfile"
        exit 1
      fi
      if ((SECONDS >= deadline)); then
        log "fauxqs did not open 127.0.0.1:$port within ${wait_secs}s; log follows"
        cat "$logfile" >&2
        kill "$pid" 2>/dev/null || true
        rm -f "$pidfile" "$portfile"
        exit 1
      fi
      sleep 0.2
    done
    log "fauxqs $FAUXQS_VERSION running on 127.0.0.1:$port (pid $pid, log $logfile)"
  fi
  echo "export SWITCHYARD_SQS_ENDPOINT=http://127.0.0.1:$port"
}

stop() {
  local pid
  if ! pid="$(running_pid)"; then
    log "not running"
    rm -f "$pidfile" "$portfile"
    return 0
  fi
  kill "$pid"
  for _ in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    log "fauxqs (pid $pid) did not stop on SIGTERM; sending SIGKILL"
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$pidfile" "$portfile"
  log "stopped (pid $pid)"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
