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

# The official Python SDK, whose client the bridge test drives through `mcp-mirror mcp`.
python_sdk_version="2.3.0"
venv="$root/target/py"
if [ ! -f "$venv/.installed-mcp-$python_sdk_version" ]; then
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv --clear "$venv"
  fi
  "$venv/bin/pip" install --quiet --disable-pip-version-check "mcp==$python_sdk_version"
  touch "$venv/.installed-mcp-$python_sdk_version"
  echo "installed the Python MCP SDK $python_sdk_version into $venv"
fi
