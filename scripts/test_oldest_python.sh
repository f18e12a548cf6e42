#!/usr/bin/env bash
# The test suite on the oldest Python Debian's mirror still serves: Debian 11 bullseye, Python 3.9
# (as on 32-bit Raspberry Pi OS Bullseye and Ubuntu 20.04), in a chroot.
#
#   sudo scripts/test_oldest_python.sh [--rebuild] [pytest args...]
#
# - Builds the chroot once with debootstrap (cached in $EDGEAPP_CHROOT, default
#   /var/cache/edgeapp/bullseye-<arch>; --rebuild starts it over), with python3-venv and the
#   shared libraries OpenCV and libedgetpu need (libgl1, libglib2.0-0, libusb-1.0-0), and a C
#   compiler for the stand-in Edge TPU libraries of tests/libedgetpu_fixtures.py.
# - Each run copies this working tree (git's tracked and untracked-not-ignored files) to
#   /work/edgeapp inside, and ../shared read-only beside it when present, then does what the
#   README says for this platform: a venv, `python -m pip install --upgrade pip` (bullseye's
#   pip 20.3.4 cannot install a pyproject-only project in editable mode), then the README's test
#   command `pip install -e '.[dev]' && python -m pytest`. TensorFlow for `convert` (and the
#   suite's fixture model) is tensorflow-cpu's cp39 wheel, like any other dependency.
# - pip inside reaches the package index the host's pip reaches: the host's pip configuration
#   files, PIP_* and proxy variables, the CA bundles they name, and the local folders they name
#   (find-links, file:// indexes) bind-mounted read-only at the same paths. pip's download
#   cache stays in the chroot, so later runs download nothing.
# - Mounts live in a private mount namespace: nothing is left mounted when the run ends.
#
# Needs root (debootstrap, chroot, mount). Exit status: pytest's.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SUITE=${EDGEAPP_CHROOT_SUITE:-bullseye}
MIRROR=${EDGEAPP_DEBIAN_MIRROR:-http://deb.debian.org/debian}
ARCH=$(dpkg --print-architecture 2>/dev/null || uname -m)
CHROOT=${EDGEAPP_CHROOT:-/var/cache/edgeapp/$SUITE-$ARCH}
PACKAGES="python3 python3-venv ca-certificates libgl1 libglib2.0-0 libusb-1.0-0 gcc libc6-dev"
VENV=/opt/edgeapp-venv

# --- inside a private mount namespace (the script re-runs itself there) ------------------------
in_namespace() {
    mapfile -d '' -t envs < "$ENVFILE"
    mount -t proc proc "$CHROOT/proc"
    mount -t sysfs sys "$CHROOT/sys"
    mount --rbind /dev "$CHROOT/dev"
    mount -t tmpfs tmpfs "$CHROOT/tmp"
    cp -L /etc/resolv.conf /etc/hosts "$CHROOT/etc/"
    local kind path
    while read -r kind path; do
        [ -n "$kind" ] || continue
        if [ "$kind" = file ]; then
            mkdir -p "$CHROOT$(dirname "$path")" && cp -L "$path" "$CHROOT$path"
        else
            mkdir -p "$CHROOT$path"
            mount --bind "$path" "$CHROOT$path" && mount -o remount,bind,ro "$CHROOT$path"
        fi
    done <<< "$carry"
    if [ -d "$ROOT/../shared" ]; then
        mkdir -p "$CHROOT/work/shared"
        mount --bind "$ROOT/../shared" "$CHROOT/work/shared" && mount -o remount,bind,ro "$CHROOT/work/shared"
    fi
    # Packages added to PACKAGES since the chroot was built.
    if [ "$(cat "$CHROOT/.edgeapp-packages" 2>/dev/null)" != "$PACKAGES" ]; then
        chroot "$CHROOT" /usr/bin/env -i "${envs[@]}" DEBIAN_FRONTEND=noninteractive sh -c \
            "apt-get update -qq && apt-get install -y -qq $PACKAGES >/dev/null"
        echo "$PACKAGES" > "$CHROOT/.edgeapp-packages"
    fi
    chroot "$CHROOT" /usr/bin/env -i "${envs[@]}" bash /work/run-tests.sh "$@"
}
if [ "${1:-}" = "--in-namespace" ]; then
    shift
    in_namespace "$@"
    exit
fi

if [ "$(id -u)" != 0 ]; then
    echo "test_oldest_python: needs root (debootstrap, chroot, mount): sudo $0" >&2
    exit 2
fi
if [ "${1:-}" = "--rebuild" ]; then
    shift
    rm -rf --one-file-system "$CHROOT"
fi

say() { echo "test_oldest_python: $*" >&2; }
t_start=$SECONDS

# One run at a time per chroot.
mkdir -p "$(dirname "$CHROOT")"
exec 9>"$CHROOT.lock"
flock 9

# --- build once -------------------------------------------------------------------------------
if [ ! -e "$CHROOT/.edgeapp-ready" ]; then
    if ! command -v debootstrap >/dev/null; then
        say "installing debootstrap"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
    fi
    say "building the $SUITE chroot in $CHROOT (once; a few minutes)"
    rm -rf --one-file-system "$CHROOT.tmp"
    debootstrap --variant=minbase --include="${PACKAGES// /,}" "$SUITE" "$CHROOT.tmp" "$MIRROR" \
        > "$CHROOT.debootstrap.log" 2>&1 || { tail -20 "$CHROOT.debootstrap.log" >&2; exit 1; }
    echo "$PACKAGES" > "$CHROOT.tmp/.edgeapp-packages"
    touch "$CHROOT.tmp/.edgeapp-ready"
    rm -rf --one-file-system "$CHROOT"
    mv "$CHROOT.tmp" "$CHROOT"
    say "chroot built in $((SECONDS - t_start)) s"
fi

# --- what pip needs from the host ---------------------------------------------------------------
# Config files, the files they name (constraints, CA bundles: copied) and the folders they name
# (find-links, file:// indexes: bind-mounted). An index folder named `simple` takes its parent,
# where such mirrors keep the files its pages link to.
carry=$(python3 - <<'EOF'
import configparser, os, sys
from urllib.parse import urlparse, unquote

home = os.path.expanduser("~")
xdg_dirs = os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":")
files = ["/etc/pip.conf"] + [os.path.join(d, "pip", "pip.conf") for d in xdg_dirs]
files += [os.path.join(home, ".pip", "pip.conf"),
          os.path.join(os.environ.get("XDG_CONFIG_HOME", os.path.join(home, ".config")), "pip", "pip.conf")]
if os.environ.get("PIP_CONFIG_FILE"):
    files.append(os.environ["PIP_CONFIG_FILE"])
keys = {"find-links", "index-url", "extra-index-url", "constraint", "requirement", "cert", "client-cert"}
values = []
for f in files:
    if os.path.isfile(f):
        print("file", f)
        cp = configparser.RawConfigParser()
        cp.read(f)
        for section in cp.sections():
            values += [v for k, v in cp.items(section) if k.replace("_", "-") in keys]
for k, v in os.environ.items():
    if k.startswith("PIP_") and k[4:].lower().replace("_", "-") in keys:
        values.append(v)
    elif k in ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "CURL_CA_BUNDLE"):
        values.append(v)
for v in values:
    for token in v.split():
        path = unquote(urlparse(token).path) if token.startswith("file:") else token
        if not os.path.isabs(path) or not os.path.exists(path):
            continue
        path = os.path.realpath(path)
        if os.path.isdir(path):
            print("dir", os.path.dirname(path) if os.path.basename(path.rstrip("/")) == "simple" else path)
        else:
            print("file", path)
EOF
)

# --- one run ------------------------------------------------------------------------------------
# The tree to test, as a fresh clone would have it plus uncommitted work.
rm -rf --one-file-system "$CHROOT/work/edgeapp"
mkdir -p "$CHROOT/work/edgeapp"
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | xargs -0 -r tar -cf - --ignore-failed-read 2>/dev/null) \
    | tar -xf - -C "$CHROOT/work/edgeapp"

# Environment for the run: nothing of the host's but pip's and the network's settings.
ENVFILE=$(mktemp)
trap 'rm -f "$ENVFILE"' EXIT
printf '%s\0' HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 LC_ALL=C.UTF-8 VENV="$VENV" > "$ENVFILE"
while IFS='=' read -r name _; do
    case "$name" in
        PIP_*|http_proxy|https_proxy|no_proxy|HTTP_PROXY|HTTPS_PROXY|NO_PROXY|REQUESTS_CA_BUNDLE|SSL_CERT_FILE|SSL_CERT_DIR|CURL_CA_BUNDLE|CI)
            printf '%s\0' "$name=${!name}" >> "$ENVFILE" ;;
    esac
done < <(env)

# What runs inside: the README's Install row for this platform (a venv, then a pip that knows
# pyproject editables), then the README's test command.
cat > "$CHROOT/work/run-tests.sh" <<'CHROOTED'
set -euo pipefail
cd /work/edgeapp
echo "test_oldest_python: $(. /etc/os-release; echo "$PRETTY_NAME"), $(python3 --version)" >&2
rm -rf "$VENV"
python3 -m venv "$VENV"
. "$VENV/bin/activate"
python -m pip install --quiet --upgrade pip
pip install --quiet -e '.[dev]' && python -m pytest "$@"
CHROOTED

export CHROOT ROOT PACKAGES ENVFILE carry
t_run=$SECONDS
set +e
unshare --mount --propagation private bash "$0" --in-namespace "$@" </dev/null
status=$?
set -e
say "Python 3.9 run: exit $status, $((SECONDS - t_run)) s (install + suite); $((SECONDS - t_start)) s in all"
exit $status
