#!/usr/bin/env bash
# Installs what fencelock's demo and tests need and is missing: the servers they start
# (redis-server, etcd, PostgreSQL 15), their clients, protoc (for the etcd client's build) and a
# Rust toolchain check. Safe to run again: it only installs what is not there.
set -euo pipefail

need_apt=()
have() { command -v "$1" >/dev/null 2>&1; }

have redis-server || need_apt+=(redis-server)
have redis-cli || need_apt+=(redis-tools)
have etcd || need_apt+=(etcd-server)
have etcdctl || need_apt+=(etcd-client)
have protoc || need_apt+=(protobuf-compiler)
[ -x /usr/lib/postgresql/15/bin/initdb ] || need_apt+=(postgresql)
have psql || need_apt+=(postgresql-client)
have cc || need_apt+=(gcc)

if [ ${#need_apt[@]} -gt 0 ]; then
  echo "fencelock: installing ${need_apt[*]} (apt)" >&2
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then
    if have sudo; then sudo_cmd=(sudo); else
      echo "fencelock: need root (or sudo) to apt-get install ${need_apt[*]}" >&2
      exit 1
    fi
  fi
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

# Debian starts the packaged services on install where it can; the tests start their own
# servers on free ports, so the packaged ones are not needed (and are left alone).

if ! have cargo; then
  echo "fencelock: cargo not found; install Rust (https://rustup.rs) and run this again" >&2
  exit 1
fi
for component in rustfmt clippy; do
  if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
    if have rustup; then rustup component add "$component"; else
      echo "fencelock: cargo $component is missing; install it with rustup component add $component" >&2
      exit 1
    fi
  fi
done
