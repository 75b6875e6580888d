# shellcheck shell=bash
# kubernetes_validate.sh: kubernetes-validate (PyPI, pinned) in a venv of its own, made once
# per cache folder and shared by the Kubernetes tests.
#
#   source "$SRC/tests/deploy/kubernetes_validate.sh"
#   kubernetes_validate_setup CACHE_DIR WORK_DIR   # sets $kv; calls the caller's `skip` when
#                                                   # the venv or PyPI cannot be had
KV_VERSION=1.37.0
kubernetes_validate_setup() {
  local cache=$1 work=$2 venv=$1/kubernetes-validate-$KV_VERSION
  kv=$venv/bin/kubernetes-validate
  mkdir -p "$cache" || skip "cannot create $cache"
  # One test at a time makes or checks the venv: two tests starting together on a fresh cache
  # removed each other's (both skipped, "does not run"). Released when the caller exits.
  exec {kv_lock}>"$cache/kubernetes-validate.lock"
  flock -w 300 "$kv_lock" || skip "the kubernetes-validate venv stayed locked for 300 s ($cache)"
  if ! "$kv" --version 2>/dev/null | grep -qx "$KV_VERSION"; then
    rm -rf "$venv"
    /usr/bin/python3 -m venv "$venv" >"$work/venv.log" 2>&1 || skip "python3 -m venv failed: $(tail -n 1 "$work/venv.log")"
    if ! timeout 120 "$venv/bin/pip" install -q --disable-pip-version-check --timeout 20 --retries 2 \
        "kubernetes-validate==$KV_VERSION" >"$work/pip.log" 2>&1; then
      rm -rf "$venv"
      skip "cannot install kubernetes-validate==$KV_VERSION from PyPI: $(tail -n 1 "$work/pip.log")"
    fi
  fi
  "$kv" --version >/dev/null 2>&1 || skip "kubernetes-validate does not run"
  flock -u "$kv_lock"
}
