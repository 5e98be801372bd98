#!/usr/bin/env bash
# Installs the pinned reference MCP servers the interop tests run, into target/interop.
# Idempotent: a version already installed from the same lock file is kept.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
for pinned in "$root"/tests/interop/server-everything-*/; do
  name="$(basename "$pinned")"
  destination="$root/target/interop/$name"
  if [ -f "$destination/.installed" ] && cmp -s "$pinned/package-lock.json" "$destination/package-lock.json"; then
    continue
  fi
  mkdir -p "$destination"
  cp "$pinned/package.json" "$pinned/package-lock.json" "$destination/"
  (cd "$destination" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  touch "$destination/.installed"
  echo "installed $name into $destination"
done
