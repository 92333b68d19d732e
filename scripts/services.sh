#!/usr/bin/env bash
# Make the local services the demo and the tests use answer, on a fresh Debian machine too:
# install what is missing (PostgreSQL, Redis, NATS and RabbitMQ for the broker sinks' tests,
# Node.js with npm for the BullMQ interop test and the JavaScript plugin example, Python's venv
# for the Python one) with apt-get, start PostgreSQL, Redis, NATS (with JetStream) and RabbitMQ
# if they are not answering, let local TCP connections in without a password (a development
# or CI machine only), and create the `test` database.
set -euo pipefail
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
missing=()
command -v pg_ctlcluster >/dev/null || missing+=(postgresql)
command -v redis-server >/dev/null || missing+=(redis-server)
command -v nats-server >/dev/null || missing+=(nats-server)
command -v rabbitmq-server >/dev/null || missing+=(rabbitmq-server)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing ${missing[*]} with apt-get"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if ! pg_isready -q -h 127.0.0.1 -p 5432; then
  echo "starting PostgreSQL"
  version="$(ls /etc/postgresql | sort -V | tail -n1)"
  as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  for _ in $(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && break; sleep 1; done
fi
if ! psql -h 127.0.0.1 -U postgres -d postgres -Atc 'select 1' >/dev/null 2>&1; then
  # A fresh install asks for a password on TCP: trust local TCP connections, as the machine
  # this project is developed on does (never do this on a shared server).
  version="$(ls /etc/postgresql | sort -V | tail -n1)"
  hba="/etc/postgresql/$version/main/pg_hba.conf"
  echo "letting local TCP connections into PostgreSQL without a password ($hba)"
  as_root sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
  as_root pg_ctlcluster --skip-systemctl-redirect "$version" main reload
  sleep 1
fi
if [ "$(psql -h 127.0.0.1 -U postgres -d postgres -Atc "select 1 from pg_database where datname = 'test'")" != 1 ]; then
  echo "creating database test"
  psql -h 127.0.0.1 -U postgres -d postgres -qc 'create database test'
fi
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  echo "starting Redis"
  as_root mkdir -p /var/lib/redis /var/log/redis
  as_root redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  for _ in $(seq 1 30); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 1; done
fi
answers() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
if ! answers 4222; then
  echo "starting NATS with JetStream"
  as_root mkdir -p /var/lib/nats-server /var/log
  as_root setsid nats-server -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server \
    -l /var/log/nats-server.log </dev/null >/dev/null 2>&1 &
  for _ in $(seq 1 30); do answers 4222 && break; sleep 1; done
fi
if ! answers 5672; then
  echo "starting RabbitMQ"
  as_root rabbitmq-server -detached >/dev/null 2>&1 || true
  # RabbitMQ takes several seconds to boot.
  for _ in $(seq 1 90); do answers 5672 && break; sleep 1; done
fi
pg_isready -h 127.0.0.1 -p 5432
redis-cli -h 127.0.0.1 -p 6379 ping
answers 4222 && echo "NATS answers on 4222"
answers 5672 && echo "RabbitMQ answers on 5672"
