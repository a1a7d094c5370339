#!/usr/bin/env bash
# Installs what fencelock's build, demo and tests read from the machine, on Debian 12 (bookworm):
#
#   scripts/install-deps.sh           install whatever is missing (apt-get, as root or with sudo)
#   scripts/install-deps.sh --check   only list what is missing, with its package; exit 1 if anything is
#
# Every check looks at the file the build or a test actually opens, not only at a command on PATH:
# a command can be present while the files next to it are not (protoc without its include files was
# the gap that broke a fresh machine: Debian only *recommends* libprotobuf-dev and we install with
# --no-install-recommends). When you add a tool or file the build or the testkit reads, add its check
# here; the list is the one place that says what fencelock needs from the machine.
#
# Protobuf: etcd-client (the `etcd` feature) compiles etcd's .proto files in its build script with
# tonic-prost-build, which runs `protoc` (or $PROTOC) and needs google/protobuf/descriptor.proto and
# struct.proto on protoc's include path (or in $PROTOC_INCLUDE). etcd-client 0.21 has no vendored-protoc
# feature, and a build script of ours cannot set environment variables for another crate's build
# script, so vendoring would only work through a .cargo/config.toml pointing into some downloaded
# crate's directory: fragile, and no help to anyone depending on the published crate. We therefore
# use Debian's protoc and include files (protobuf-compiler + libprotobuf-dev) and check for both.
# Users elsewhere can point PROTOC and PROTOC_INCLUDE at their own copies; this script honours them.
set -euo pipefail

mode=install
case "${1:-}" in
  "") ;;
  --check) mode=check ;;
  -h | --help)
    sed -n '2,5p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "usage: scripts/install-deps.sh [--check]" >&2
    exit 2
    ;;
esac

have() { command -v "$1" >/dev/null 2>&1; }

pg_bin="${FENCELOCK_PG_BIN:-/usr/lib/postgresql/15/bin}"
proto_include="${PROTOC_INCLUDE:-/usr/include}"

# Each missing piece: "package<TAB>what is missing (who reads it)".
missing=()
need() { missing+=("$1"$'\t'"$2"); }
need_cmd() { have "$1" || need "$2" "command $1 ($3)"; }
need_file() { [ -e "$1" ] || need "$2" "$1 ($3)"; }

# The C toolchain's own files: rusqlite's bundled SQLite, ring and the testkit's LD_PRELOAD clock
# shim compile C, and rustc links every binary through cc. `cc -print-file-name=X` prints X itself
# when the linker cannot find it.
c_file() {
  local found
  found=$(cc -print-file-name="$1" 2>/dev/null) || return 1
  [ "$found" != "$1" ] && [ -e "$found" ]
}

collect() {
  missing=()
  need_cmd redis-server redis-server "the testkit and fencelock up start it"
  need_cmd redis-cli redis-tools "tests inspect nodes with it"
  need_cmd etcd etcd-server "the testkit starts it"
  need_cmd etcdctl etcd-client "the testkit's etcd test runs it"
  need_cmd ps procps "run's guard reads the process tree with it where there is no /proc; a test checks that path"

  if [ -n "${PROTOC:-}" ]; then
    [ -x "$PROTOC" ] || need protobuf-compiler "PROTOC=$PROTOC (etcd-client's build runs it)"
  else
    need_cmd protoc protobuf-compiler "etcd-client's build runs it"
  fi
  need_file "$proto_include/google/protobuf/descriptor.proto" libprotobuf-dev "etcd-client's build imports it"
  need_file "$proto_include/google/protobuf/struct.proto" libprotobuf-dev "etcd-client's build imports it"

  for bin in initdb postgres pg_isready; do
    need_file "$pg_bin/$bin" postgresql-15 "the testkit runs it"
  done
  need_cmd psql postgresql-client-15 "the testkit runs SQL with it"
  # The sqlx MySQL fence's tests: the testkit starts mariadbd on a free port with its own data
  # directory (never the packaged service), made by mariadb-install-db, and runs SQL with mariadb.
  need_file "${FENCELOCK_MARIADBD:-/usr/sbin/mariadbd}" mariadb-server "the testkit runs it"
  need_cmd mariadb-install-db mariadb-server "the testkit makes its data directory with it"
  need_cmd mariadb mariadb-client "the testkit runs SQL with it"
  # The ZooKeeper backend's tests: the testkit starts QuorumPeerMain from Debian's zookeeper package
  # (3.8, its jar names its dependencies in its manifest) with java, on free ports and its own data
  # directories, never the packaged service. slf4j-simple gives the server a log the testkit keeps.
  need_file "${FENCELOCK_ZOOKEEPER_JAR:-/usr/share/java/zookeeper.jar}" zookeeper "the testkit runs the server from it"
  need_file /usr/share/java/slf4j-simple.jar libslf4j-java "the testkit's ZooKeeper servers log through it"
  need_cmd java default-jre-headless "the testkit runs ZooKeeper with it"
  # As root the testkit runs PostgreSQL as this user (PostgreSQL refuses root); postgresql-common's
  # install creates it.
  getent passwd postgres >/dev/null || need postgresql-common "user postgres (the testkit runs PostgreSQL as it)"

  if have cc; then
    need_file /usr/include/stdio.h libc6-dev "C headers for bundled SQLite, ring, the clock shim"
    for f in crt1.o crti.o libc.so libdl.a; do
      c_file "$f" || need libc6-dev "$f for cc (rustc links through cc; the clock shim links -ldl)"
    done
    c_file libgcc_s.so || need gcc "libgcc_s.so for cc (rustc links through cc)"
  else
    need gcc "command cc (rustc links through it; SQLite, ring and the clock shim compile with it)"
    need_file /usr/include/stdio.h libc6-dev "C headers for bundled SQLite, ring, the clock shim"
  fi

  # cargo downloads crates over HTTPS and trusts the system's certificate store.
  need_file /etc/ssl/certs/ca-certificates.crt ca-certificates "cargo's downloads from crates.io"
}

report() {
  local line
  for line in "${missing[@]}"; do
    printf 'fencelock: missing %s: apt-get install %s\n' "${line#*$'\t'}" "${line%%$'\t'*}" >&2
  done
}

packages() {
  local line
  for line in "${missing[@]}"; do printf '%s\n' "${line%%$'\t'*}"; done | sort -u
}

check_rust() {
  local ok=0
  if ! have cargo; then
    echo "fencelock: cargo not found; install Rust (https://rustup.rs) and run this again" >&2
    return 1
  fi
  for component in rustfmt clippy; do
    if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
      if [ "$mode" = install ] && have rustup; then
        rustup component add "$component"
      else
        echo "fencelock: missing cargo ${component/rustfmt/fmt}: rustup component add $component" >&2
        ok=1
      fi
    fi
  done
  return "$ok"
}

collect
if [ "$mode" = check ]; then
  status=0
  if [ ${#missing[@]} -gt 0 ]; then
    report
    status=1
  fi
  check_rust || status=1
  [ "$status" -eq 0 ] && echo "fencelock: every build and test prerequisite is present" >&2
  exit "$status"
fi

if [ ${#missing[@]} -gt 0 ]; then
  mapfile -t pkgs < <(packages)
  echo "fencelock: installing ${pkgs[*]} (apt)" >&2
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then
    if have sudo; then sudo_cmd=(sudo); else
      report
      echo "fencelock: need root (or sudo) to apt-get install ${pkgs[*]}" >&2
      exit 1
    fi
  fi
  "${sudo_cmd[@]}" apt-get update -qq
  # gcc is asked for by name but the C headers and crt files come from libc6-dev, which gcc only
  # recommends: it is in the list on its own, so --no-install-recommends cannot drop it.
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
  # Installing can satisfy one check and not another (a package renamed, an override pointing
  # elsewhere): say what is still missing rather than leave it to a build script's panic.
  collect
  if [ ${#missing[@]} -gt 0 ]; then
    report
    exit 1
  fi
fi

# Debian starts the packaged services on install where it can; the tests start their own
# servers on free ports, so the packaged ones are not needed (and are left alone).

check_rust
