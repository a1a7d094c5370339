#!/bin/sh
# Type-checks the command for macOS (x86_64-apple-darwin) from this Linux machine, to keep the
# parts of `fencelock run` that only Linux has behind their cfg gates.
#
#   rustup target add x86_64-apple-darwin
#   scripts/check-macos.sh
#
# A check links nothing, but the build scripts of ring and SQLite still run a C compiler for the
# target, and there is no macOS C toolchain here: a stand-in compiler writes empty objects, so
# only the Rust code is checked. Not part of ./dev test: a cold run takes ~15 min on 2 cores.
set -eu
cd "$(dirname "$0")/.."
fake=$(mktemp -d)
trap 'rm -rf "$fake"' EXIT
cat > "$fake/cc" <<'CC'
#!/bin/sh
out=""
prev=""
for a in "$@"; do
  if [ "$prev" = "-o" ]; then out="$a"; fi
  case "$a" in -Fo*) out="${a#-Fo}";; -o?*) out="${a#-o}";; esac
  prev="$a"
done
case " $* " in *" --version "*|*" -v "*) echo "stand-in cc"; exit 0;; esac
if [ -n "$out" ]; then : > "$out"; fi
exit 0
CC
chmod +x "$fake/cc"
CC_x86_64_apple_darwin="$fake/cc" AR_x86_64_apple_darwin=ar \
  CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/check-macos" \
  cargo check --target x86_64-apple-darwin -p fencelock-cli --all-features "$@"
