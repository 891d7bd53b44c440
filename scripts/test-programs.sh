#!/usr/bin/env bash
# Installs the programs the test suite runs, on Debian/Ubuntu, as root: one quiet
# `apt-get update`, one `apt-get install` of whatever is missing.  Not root, or no
# apt-get: prints what to install and exits 0 (the tests that need a missing
# program skip, naming it).  Arguments: extra Debian packages to install.
set -euo pipefail

# program (absolute path, or a name looked up on PATH)  Debian package
PROGRAMS="
/usr/sbin/sshd          openssh-server
ssh                     openssh-client
ssh-keygen              openssh-client
ip                      iproute2
unshare                 util-linux
nsenter                 util-linux
rsync                   rsync
tmux                    tmux
/usr/sbin/munged        munge
/usr/sbin/slurmctld     slurmctld
/usr/sbin/slurmd        slurmd
srun                    slurm-client
klist                   krb5-user
/usr/sbin/krb5kdc       krb5-kdc
/usr/sbin/kadmin.local  krb5-admin-server
/usr/sbin/dnsmasq       dnsmasq-base
xauth                   xauth
zsh                     zsh
tcsh                    tcsh
fish                    fish
ksh                     ksh
strace                  strace
"

missing=("$@")
while read -r program package; do
    [ -n "$program" ] || continue
    if [ "${program#/}" != "$program" ]; then [ -x "$program" ] && continue
    else command -v "$program" >/dev/null && continue; fi
    case " ${missing[*]-} " in *" $package "*) ;; *) missing+=("$package") ;; esac
done <<<"$PROGRAMS"
[ ${#missing[@]} -gt 0 ] || exit 0

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "test-programs.sh: not installed: ${missing[*]}" >&2
    echo "  install them (Debian/Ubuntu: sudo apt-get install ${missing[*]}), or run" \
        "scripts/test.sh as root; meanwhile the tests that need them are skipped" >&2
    exit 0
fi

# Without systemd, package scripts would start munged/slurmd from /etc/init.d with
# the system's configuration; the suite starts its own.  policy-rc.d (101: "action
# not allowed") stops that, as Debian's container images do.
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy"
    trap 'rm -f "$policy"' EXIT
fi
echo "test-programs.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
