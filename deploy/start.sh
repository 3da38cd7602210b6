#!/usr/bin/env bash
# Starts, on this machine: one Redis, N replicas of `recur serve` sharing their conversations
# through it, and nginx in front of them, round robin.
#
#   deploy/start.sh DIR [--replicas 2] [--port 8080] [--redis-port 6379] [--threads 1]
#                       [--recur build/release/tools/recur] [--replica-env VAR=VALUE]...
#                       [--api-key-file FILE] [-- options for every replica]
#   deploy/stop.sh DIR
#
# DIR holds everything: redis/ (its append-only file, so states survive a Redis restart),
# nginx.conf, the logs and the pid files. Replica i listens on PORT + i, nginx on PORT. The i-th
# --replica-env sets a variable for replica i alone (RECUR_ISA=avx2, say). Every replica gets the
# same API keys: --api-key-file FILE (one key per line), and RECUR_API_KEY from the environment;
# a conversation made with a key then continues with that key alone, on any replica. Needs
# redis-server and nginx (Debian's redis-server and nginx packages).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
(($# >= 1)) || usage
[[ "$1" == -h || "$1" == --help ]] && usage
dir="$1"; shift
replicas=2 port=8080 redis_port=6379 threads=1 recur="$here/../build/release/tools/recur" host=127.0.0.1
envs=() extra=() keys=()
while (($#)); do
  case "$1" in
    --replicas) replicas="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --redis-port) redis_port="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --recur) recur="$2"; shift 2 ;;
    --replica-env) envs+=("$2"); shift 2 ;;
    --api-key-file) keys=(--api-key-file "$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"); shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "deploy/start.sh: unknown option $1" >&2; usage ;;
  esac
done
command -v redis-server > /dev/null || { echo "deploy/start.sh: redis-server is missing (apt-get install redis-server)" >&2; exit 1; }
command -v nginx > /dev/null || [[ -x /usr/sbin/nginx ]] || { echo "deploy/start.sh: nginx is missing (apt-get install nginx)" >&2; exit 1; }
nginx=$(command -v nginx || echo /usr/sbin/nginx)
mkdir -p "$dir/redis"
dir="$(cd "$dir" && pwd)"

# Redis: loopback only, an append-only file so that acknowledged states survive its restart.
redis-server --bind "$host" --port "$redis_port" --dir "$dir/redis" --appendonly yes --save "" \
  --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"
for _ in $(seq 100); do redis-cli -h "$host" -p "$redis_port" ping > /dev/null 2>&1 && break; sleep 0.1; done
redis-cli -h "$host" -p "$redis_port" ping > /dev/null || { echo "deploy/start.sh: Redis did not start (see $dir/redis.log)" >&2; exit 1; }

# The replicas.
upstreams=""
for i in $(seq 1 "$replicas"); do
  p=$((port + i))
  env_i=()
  ((${#envs[@]} >= i)) && env_i=("${envs[$((i - 1))]}")
  env "${env_i[@]}" "$recur" serve --host "$host" --port "$p" --threads "$threads" \
    --store "redis://$host:$redis_port/0" --instance "replica-$i" "${keys[@]}" "${extra[@]}" \
    > "$dir/replica-$i.log" 2>&1 &
  echo $! > "$dir/replica-$i.pid"
  upstreams+="    server $host:$p max_fails=1 fail_timeout=2s;"$'\n'
done
for i in $(seq 1 "$replicas"); do
  for _ in $(seq 600); do grep -q "listening on" "$dir/replica-$i.log" && break; sleep 0.1; done
  grep -q "listening on" "$dir/replica-$i.log" || { echo "deploy/start.sh: replica $i did not start:" >&2; cat "$dir/replica-$i.log" >&2; exit 1; }
done

# nginx, from the template.
user=""
[[ $(id -u) -eq 0 ]] && user="user root root;"
mkdir -p "$dir"/nginx-{body,proxy,fastcgi,uwsgi,scgi}
sed -e "s|@DIR@|$dir|g" -e "s|@HOST@|$host|g" -e "s|@PORT@|$port|g" -e "s|@USER@|$user|" \
    -e "/@UPSTREAMS@/{
r /dev/stdin
d
}" "$here/nginx.conf.in" > "$dir/nginx.conf" <<< "${upstreams%$'\n'}"
"$nginx" -p "$dir" -c "$dir/nginx.conf" -e "$dir/nginx-error.log"
for _ in $(seq 100); do [[ -s "$dir/nginx.pid" ]] && break; sleep 0.1; done
echo "recur: http://$host:$port/v1 -> $replicas replicas ($dir/replica-*.log), Redis on $host:$redis_port; deploy/stop.sh $dir stops them"
