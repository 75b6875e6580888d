#!/bin/sh
# The archive's bin/meshrun: checks that this system's glibc is new enough
# for meshrun's programs, then runs meshrun itself (libexec/meshrun/meshrun,
# beside its worker shim) with every argument as given. Without this check
# an older glibc shows only the loader's "GLIBC_2.34 not found" lines.
# The .deb and the wheel need no such check: dpkg and pip refuse them there.
need_major=2
need_minor=@GLIBC_FLOOR_MINOR@
self=$(readlink -f "$0" 2>/dev/null) || self=$0
real="${self%/bin/*}/libexec/meshrun/meshrun"
found=$(getconf GNU_LIBC_VERSION 2>/dev/null) && found=${found#glibc }
case "$found" in
  [0-9]*.[0-9]*)
    major=${found%%.*}
    minor=${found#*.}
    minor=${minor%%[!0-9]*}
    if [ "$major" -lt "$need_major" ] || { [ "$major" -eq "$need_major" ] && [ "$minor" -lt "$need_minor" ]; }; then
      echo "meshrun: error: this system has glibc $found; meshrun needs glibc $need_major.$need_minor or newer (Debian 12, Ubuntu 22.04, RHEL 9 or later)" >&2
      exit 1
    fi
    ;;
esac
exec "$real" "$@"
