#!/usr/bin/env bash
# Install aiperf (editable) and the extra REQUIREMENT names into the virtual environment VENV:
#
#   infra/install.sh VENV '.[dev]'
#
# With uv (https://docs.astral.sh/uv/, installed into VENV by pip first): uv resolves from the same
# indexes as pip, honours pyproject.toml's dependencies, downloads and unpacks in parallel and
# compiles the bytecode as pip does, which takes a fresh clone's install from about 90 s to about
# 35 s on a 2-vCPU machine with a cold package cache (docs/performance.md, "A newcomer's first
# minutes"). It reads pip's own configuration (`pip config list`: files and PIP_* variables), so a
# site's index, extra indexes, wheel folders, constraints and certificate bundle hold for both.
# Where uv cannot be installed, pip installs as before. AIPERF_INSTALLER=pip chooses pip.
# Quiet unless something fails: the output of a failed install is printed whole.
set -euo pipefail

venv=${1:?usage: infra/install.sh VENV REQUIREMENT}
requirement=${2:?usage: infra/install.sh VENV REQUIREMENT}
python=${PYTHON:-python3}
log=$(mktemp)
trap 'rm -f "$log"' EXIT

quietly() {  # run a command, printing its output only if it fails
    if ! "$@" >"$log" 2>&1; then
        grep -v "^WARNING: Location" "$log" >&2 || true
        return 1
    fi
}

[[ -x $venv/bin/python ]] || quietly "$python" -m venv "$venv"

# pip's configuration as uv's options: pip config list prints key='value' per line.
uv_options() {
    local key value
    "$venv/bin/python" -m pip config list 2>/dev/null | while IFS='=' read -r key value; do
        value=${value#\'}
        value=${value%\'}
        case ${key##*.} in
            index-url) echo "--index-url=$value" ;;
            extra-index-url) for url in $value; do echo "--extra-index-url=$url"; done ;;
            find-links) for link in $value; do echo "--find-links=$link"; done ;;
            constraint) for file in $value; do echo "--constraint=$file"; done ;;
        esac
    done
}

with_uv() {
    [[ -x $venv/bin/uv ]] || quietly "$venv/bin/python" -m pip install "uv>=0.5,<1" || return 1
    local cert options
    cert=$("$venv/bin/python" -m pip config list 2>/dev/null | sed -n "s/^[^=]*\.cert='\(.*\)'$/\1/p")
    [[ -z ${SSL_CERT_FILE:-} && -n $cert ]] && export SSL_CERT_FILE=${cert##*$'\n'}
    mapfile -t options < <(uv_options | sort -u)
    # unsafe-best-match: the newest version any index offers, as pip chooses (uv's default takes
    # the first index that has the package at all).
    quietly "$venv/bin/uv" pip install \
        --python "$venv/bin/python" --compile-bytecode --index-strategy unsafe-best-match \
        "${options[@]}" -e "$requirement"
}

if [[ ${AIPERF_INSTALLER:-uv} != pip ]] && with_uv; then
    exit 0
fi
echo "infra/install.sh: installing with pip" >&2
quietly "$venv/bin/python" -m pip install --upgrade pip
quietly "$venv/bin/python" -m pip install -e "$requirement"
