#!/usr/bin/env bash
# Regenerate the vendored bpf/include/vmlinux/<arch>/vmlinux.h from the running
# kernel's BTF. The build never reads the kernel's BTF itself: the BPF programs
# compile against this vendored dump (CO-RE relocates field accesses at load
# time), so run this only to pick up kernel types the programs start to use.
#
# Usage: scripts/gen_vmlinux.sh [OUTPUT]
#   OUTPUT   where to write (default: bpf/include/vmlinux/x86/vmlinux.h on x86_64,
#            bpf/include/vmlinux/arm64/vmlinux.h on aarch64: a full dump there
#            replaces the minimal one scripts/gen_min_vmlinux.py writes)
#   GPUSCOPE_BTF=PATH   read BTF from PATH instead of /sys/kernel/btf/vmlinux
#
# Exit codes: 0 written, 2 usage, 3 this machine cannot produce the dump.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
case "$(uname -m)" in
aarch64) default_out="$root/bpf/include/vmlinux/arm64/vmlinux.h" ;;
*) default_out="$root/bpf/include/vmlinux/x86/vmlinux.h" ;;
esac
btf="${GPUSCOPE_BTF:-/sys/kernel/btf/vmlinux}"

fail() {
	code="$1"
	shift
	printf 'error: %s\n' "$1" >&2
	shift
	for line in "$@"; do
		printf '  fix: %s\n' "$line" >&2
	done
	exit "$code"
}

case "${1:-}" in
-h | --help)
	sed -n '2,13s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
	exit 0
	;;
-*) fail 2 "unknown option $1 (usage: scripts/gen_vmlinux.sh [OUTPUT])" ;;
esac
[ "$#" -le 1 ] || fail 2 "too many arguments (usage: scripts/gen_vmlinux.sh [OUTPUT])"
out="${1:-$default_out}"

# The vendored headers are per architecture: types differ between them.
if [ "$out" = "$default_out" ] && [ "$(uname -m)" != "x86_64" ] && [ "$(uname -m)" != "aarch64" ]; then
	fail 3 "this kernel is $(uname -m); the vendored headers are for x86_64 and aarch64" \
		"pass an output path, e.g. scripts/gen_vmlinux.sh bpf/include/vmlinux/$(uname -m)/vmlinux.h"
fi
if ! command -v bpftool >/dev/null 2>&1; then
	fail 3 "bpftool not found" \
		"Debian: apt-get install bpftool; Ubuntu: apt-get install linux-tools-\$(uname -r)"
fi
if [ ! -r "$btf" ]; then
	fail 3 "no readable kernel BTF at $btf" \
		"use a kernel built with CONFIG_DEBUG_INFO_BTF=y, or point GPUSCOPE_BTF at a BTF file"
fi

mkdir -p "$(dirname "$out")"
# Write beside the target and rename, so a failed dump never leaves half a header.
tmp="$(mktemp "$out.XXXXXX")"
trap 'rm -f "$tmp"' EXIT
if ! bpftool btf dump file "$btf" format c >"$tmp"; then
	fail 3 "bpftool could not dump $btf" "run: bpftool btf dump file $btf format c"
fi
grep -q '^#define __VMLINUX_H__' "$tmp" || fail 3 "bpftool wrote no vmlinux.h from $btf"
chmod 644 "$tmp"
mv "$tmp" "$out"
trap - EXIT
printf 'wrote %s (%s lines) from %s, kernel %s\n' "$out" "$(wc -l <"$out")" "$btf" "$(uname -r)"
