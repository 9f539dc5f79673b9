#!/usr/bin/env bash
# Installs the Debian packages tqserve builds and tests with. Idempotent: does nothing when
# everything is present. Run as root (or with sudo available).
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config git
      nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev
      libgtest-dev libgmock-dev libbenchmark-dev
      libpcre2-dev libutf8proc-dev libopenblas-dev
      libcpp-httplib-dev clang libclang-rt-dev curl python3
      chromium)  # the /admin page's browser tests (headless, driven by playwright-core)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js and npm run the official openai client in the server tests; a machine may carry them
# outside Debian's packages (e.g. NodeSource's nodejs bundles npm), so check the commands.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# playwright-core (pinned in tests/browser/package-lock.json) drives the system chromium; it
# downloads no browser of its own.
browser_dir="$(cd "$(dirname "$0")/.." && pwd)/tests/browser"
if [ ! -f "$browser_dir/node_modules/playwright-core/package.json" ]; then
  echo "installing playwright-core into tests/browser/node_modules"
  (cd "$browser_dir" && npm ci --no-audit --no-fund --loglevel=error)
fi
