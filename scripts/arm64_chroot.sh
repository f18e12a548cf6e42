#!/usr/bin/env bash
# `edgeapp compile` on ARM Linux, for real: an arm64 Debian bookworm chroot (what Raspberry Pi OS
# 64-bit is built from) on this x86-64 host, where edgeapp runs the x86-64 Edge TPU compiler
# through QEMU user-mode emulation, as on a Raspberry Pi.
#
#   sudo scripts/arm64_chroot.sh [--rebuild] [--report FILE]
#
# - Builds the chroot once with debootstrap (cached in $EDGEAPP_ARM64_CHROOT, default
#   /var/cache/edgeapp/bookworm-arm64; --rebuild starts it over). The host needs
#   `apt-get install debootstrap qemu-user-static binfmt-support` and binfmt_misc mounted (done
#   here) so arm64 programs run. Inside: python3-venv, and edgeapp with only what `compile`
#   needs, in /opt/edgeapp-venv.
# - The compiler is the suite's stand-in (tests/compiler_standin.py: a small C program built
#   with the host's gcc, laid out as Google's compiler/x86_64 folder with the host's own loader
#   and libc), installed with `edgeapp compiler install --from` as a .deb. No real compiler is
#   available here.
# - Runs, inside the chroot: `edgeapp compile` without QEMU (expects exit 7 and the install
#   line), then with Debian's qemu-user installed (expects exit 0, run through qemu-x86_64),
#   and times the stand-in natively on the host and under QEMU in the chroot, also with
#   STANDIN_WORK CPU work. Each result is one `key=value` line on stdout (--report FILE copies
#   them); the exit status is 0 only when every expectation held.
# - Mounts live in a private mount namespace: nothing is left mounted when the run ends.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
CHROOT=${EDGEAPP_ARM64_CHROOT:-/var/cache/edgeapp/bookworm-arm64}
MIRROR=${EDGEAPP_DEBIAN_MIRROR:-http://deb.debian.org/debian}
PYTHON=${PYTHON:-python3}
WORK=${EDGEAPP_STANDIN_WORK:-40}
REPORT=""

say() { echo "arm64_chroot: $*" >&2; }

in_namespace() {
    mount -t proc proc "$CHROOT/proc"
    mount -t sysfs sys "$CHROOT/sys"
    mount --bind /dev "$CHROOT/dev"
    mount -t tmpfs tmpfs "$CHROOT/tmp"
    cp -L /etc/resolv.conf "$CHROOT/etc/"
    chroot "$CHROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        EDGEAPP_NO_PROGRESS=1 STANDIN_WORK_N="$WORK" bash /work/scenario.sh
}
if [ "${1:-}" = "--in-namespace" ]; then
    in_namespace
    exit
fi

if [ "$(id -u)" != 0 ]; then
    echo "arm64_chroot: needs root (debootstrap, chroot, mount): sudo $0" >&2
    exit 2
fi
while [ $# -gt 0 ]; do
    case "$1" in
        --rebuild) rm -rf --one-file-system "$CHROOT"; shift ;;
        --report) REPORT=$2; shift 2 ;;
        *) echo "arm64_chroot: unknown argument $1" >&2; exit 2 ;;
    esac
done

# arm64 programs on this host: QEMU's binfmt_misc registration (F flag: works in a chroot)
if [ ! -e /proc/sys/fs/binfmt_misc/status ]; then
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
fi
if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
    command -v update-binfmts >/dev/null || { say "needs: apt-get install qemu-user-static binfmt-support"; exit 2; }
    update-binfmts --enable qemu-aarch64
fi

pip_trust() {  # pip inside trusts what the host's pip trusts (a proxy's CA, if the host has one)
    local ca
    ca=${PIP_CERT:-$(python3 -c 'import ssl; print(ssl.get_default_verify_paths().cafile or "")')}
    cp -L /etc/resolv.conf "$CHROOT/etc/"
    if [ -n "$ca" ] && [ -f "$ca" ]; then
        cp -L "$ca" "$CHROOT/etc/ssl/certs/edgeapp-host-ca.crt"
        printf '[global]\ncert = /etc/ssl/certs/edgeapp-host-ca.crt\n' > "$CHROOT/etc/pip.conf"
    fi
}

if [ ! -x "$CHROOT/opt/edgeapp-venv/bin/python" ] || [ ! -x "$CHROOT/opt/edgeapp-venv/bin/typer" ]; then
    command -v debootstrap >/dev/null || { say "needs: apt-get install debootstrap qemu-user-static binfmt-support"; exit 2; }
    if [ ! -x "$CHROOT/usr/bin/python3" ]; then
        say "debootstrap arm64 bookworm into $CHROOT (about 6 minutes)"
        rm -rf --one-file-system "$CHROOT.partial"
        debootstrap --arch=arm64 --variant=minbase --include=python3,python3-venv,ca-certificates \
            bookworm "$CHROOT.partial" "$MIRROR" >&2
        mv "$CHROOT.partial" "$CHROOT"
    fi
    pip_trust
    say "a venv with edgeapp's compile dependencies in the chroot"
    chroot "$CHROOT" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root sh -c \
        "python3 -m venv /opt/edgeapp-venv && /opt/edgeapp-venv/bin/pip install -q wheel typer rich typing-extensions 'numpy<2.3' flatbuffers pillow" >&2
fi

# This working tree (tracked and untracked-not-ignored files) at /work/edgeapp inside.
rm -rf --one-file-system "$CHROOT/work"
mkdir -p "$CHROOT/work/edgeapp"
(cd "$ROOT" && git ls-files -z --cached --others --exclude-standard | tar --null -T - -cf -) \
    | tar -xf - -C "$CHROOT/work/edgeapp"
pip_trust
chroot "$CHROOT" /opt/edgeapp-venv/bin/pip install -q wheel >&2
chroot "$CHROOT" /opt/edgeapp-venv/bin/pip install -q --no-deps --no-build-isolation -e /work/edgeapp >&2

# The stand-in compiler, built on this host, packed as Coral's .deb; a model to compile.
"$PYTHON" - "$ROOT/tests" "$CHROOT/work" <<'EOF'
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import compiler_standin as s
work = Path(sys.argv[2])
bundle = s.build_bundle(work / "standin")
s.make_deb(bundle, work / "edgetpu-compiler_16.0_amd64.deb")
EOF
cp "$ROOT/models/digits_int8.tflite" "$CHROOT/work/digits.tflite"

# Native baseline on this host: the same files, the same loader, no emulation.
native() {
    local t0 t1
    t0=$(date +%s.%N)
    STANDIN_WORK=$1 "$CHROOT/work/standin/edgetpu_compiler_bin/ld-linux-x86-64.so.2" --library-path \
        "$CHROOT/work/standin/edgetpu_compiler_bin" "$CHROOT/work/standin/edgetpu_compiler_bin/edgetpu_compiler" \
        --out_dir "$CHROOT/tmp" "$CHROOT/work/digits.tflite" >/dev/null
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc
}
command -v bc >/dev/null || apt-get install -y -qq bc >/dev/null
NATIVE0=$(native 0)
NATIVEW=$(native "$WORK")

cat > "$CHROOT/work/scenario.sh" <<'EOF'
set -u
E=/opt/edgeapp-venv/bin/edgeapp
export XDG_DATA_HOME=/work/data
ok=1
echo "machine=$(uname -m)"
echo "python_machine=$(/opt/edgeapp-venv/bin/python -c 'import platform; print(platform.machine())')"
apt-get remove -y -qq qemu-user >/dev/null 2>&1 || true
$E compiler install --from /work/edgetpu-compiler_16.0_amd64.deb > /work/install.out 2>&1
echo "install_without_qemu_exit=$?"
$E compile /work/digits.tflite -o /work/out0 > /work/noqemu.out 2> /work/noqemu.err
code=$?
echo "compile_without_qemu_exit=$code"
echo "compile_without_qemu_says=$(tail -1 /work/noqemu.err)"
[ "$code" = 7 ] && grep -q "sudo apt-get install qemu-user" /work/noqemu.err || ok=0
DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user >/dev/null 2>&1
echo "qemu=$(command -v qemu-x86_64) $(dpkg-query -W -f '${Version}' qemu-user)"
$E compiler show > /work/show.out 2>&1
echo "show_runs=$(grep '^runs' /work/show.out | sed 's/^runs *//')"
start=$(date +%s.%N)
$E compile /work/digits.tflite -o /work/out1 > /work/qemu.out 2> /work/qemu.err
code=$?
end=$(date +%s.%N)
echo "compile_with_qemu_exit=$code"
echo "compile_with_qemu_seconds=$(python3 -c "print(round($end - $start, 3))")"
grep -q "run through qemu" /work/qemu.out && grep -q "qemu-x86_64" /work/qemu.err || ok=0
[ "$code" = 0 ] && [ -s /work/out1/digits_edgetpu.tflite ] || ok=0
for n in 0 "$STANDIN_WORK_N"; do
    start=$(date +%s.%N)
    STANDIN_WORK=$n qemu-x86_64 /work/standin/edgetpu_compiler_bin/ld-linux-x86-64.so.2 --library-path \
        /work/standin/edgetpu_compiler_bin /work/standin/edgetpu_compiler_bin/edgetpu_compiler \
        --out_dir /tmp /work/digits.tflite > /dev/null
    end=$(date +%s.%N)
    echo "standin_qemu_work${n}_seconds=$(python3 -c "print(round($end - $start, 3))")"
done
$E doctor > /work/doctor.out 2>&1
echo "doctor_compiler=$(grep edgetpu_compiler /work/doctor.out | head -1)"
echo "expectations_held=$ok"
[ "$ok" = 1 ]
EOF

set +e
OUT=$(unshare --mount --propagation private "$0" --in-namespace)
status=$?
set -e
{
    echo "$OUT"
    echo "standin_native_work0_seconds=$NATIVE0"
    echo "standin_native_work${WORK}_seconds=$NATIVEW"
} | tee ${REPORT:+"$REPORT"}
exit $status
