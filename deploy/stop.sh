#!/usr/bin/env bash
# Stops what deploy/start.sh DIR started: nginx, then each replica (SIGTERM: it finishes its
# requests and exits 0), then Redis. Exits 1 if a replica did not exit 0.
set -uo pipefail
dir="${1:?usage: deploy/stop.sh DIR}"
status=0
[[ -s "$dir/nginx.pid" ]] && kill -QUIT "$(cat "$dir/nginx.pid")" 2> /dev/null
for f in "$dir"/replica-*.pid; do
  [[ -f "$f" ]] || continue
  pid=$(cat "$f")
  if kill -TERM "$pid" 2> /dev/null; then
    # wait for a process that is not our child: poll until it is gone.
    for _ in $(seq 600); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2> /dev/null; then
      echo "deploy/stop.sh: $(basename "$f" .pid) did not stop" >&2; status=1
    elif ! grep -q "stopped:" "$dir/$(basename "$f" .pid).log"; then
      echo "deploy/stop.sh: $(basename "$f" .pid) did not shut down cleanly (see its log)" >&2; status=1
    fi
  fi
  rm -f "$f"
done
if [[ -s "$dir/redis.pid" ]]; then
  pid=$(cat "$dir/redis.pid")
  kill -TERM "$pid" 2> /dev/null
  for _ in $(seq 100); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
fi
exit $status
