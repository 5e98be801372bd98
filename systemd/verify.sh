#!/usr/bin/env bash
# Runs `systemd-analyze verify` on every unit, and prints the system unit's exposure score.
#
# verify insists that ExecStart's program exists, and the units name the installed path
# (/usr/local/bin/mcp-mirror); so each unit is checked as a copy whose only change is that
# path, pointed at the binary built here.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --quiet --bin mcp-mirror
binary="$PWD/target/debug/mcp-mirror"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/system" "$scratch/user" "$scratch/runtime"
chmod 700 "$scratch/runtime"
for unit in systemd/*.service systemd/*.socket; do
  sed "s|/usr/local/bin/mcp-mirror|$binary|g" "$unit" >"$scratch/system/$(basename "$unit")"
done
for unit in systemd/user/*.service systemd/user/*.socket; do
  sed "s|/usr/local/bin/mcp-mirror|$binary|g" "$unit" >"$scratch/user/$(basename "$unit")"
done

# verify prints nothing when a unit is fine, and exits non-zero on any problem.
(cd "$scratch/system" && systemd-analyze verify --man=no ./*.service ./*.socket)
# A user manager needs a runtime directory to resolve %t.
(cd "$scratch/user" && XDG_RUNTIME_DIR="$scratch/runtime" systemd-analyze --user verify --man=no ./*.service ./*.socket)
echo "systemd-analyze verify: all units pass"
# The threshold is on systemd's 0-100 scale: 20 fails the check once the score passes 2.0,
# so a change that weakens the sandbox is noticed here.
(cd "$scratch/system" && systemd-analyze security --offline=yes --threshold=20 ./mcp-mirror.service | tail -n 1)
