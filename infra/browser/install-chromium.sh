#!/usr/bin/env bash
# Print the path of a headless-capable Chromium, installing Debian's `chromium` first when it is
# missing (CI machines start fresh). The HTML report test opens reports with it.
set -euo pipefail
for name in chromium chromium-browser; do
  if command -v "$name" >/dev/null 2>&1; then command -v "$name"; exit 0; fi
done
if [ "$(id -u)" != 0 ]; then
  echo "chromium is missing and only root can install it: apt-get install -y chromium" >&2
  exit 1
fi
echo "installing Debian's chromium" >&2
apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >&2
command -v chromium
