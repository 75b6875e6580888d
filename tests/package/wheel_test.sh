#!/usr/bin/env bash
# The wheel, from the file (docs/install.md): auditwheel's tag is the oldest
# manylinux its glibc symbols allow; a fresh venv installs it (pip, no index);
# its meshrun, started by path from outside the venv, runs a Python program
# with the venv's interpreter (sys.executable), and PYTHON_EXEC still wins.
#   usage: wheel_test.sh SOURCE_DIR BINARY_DIR
SOURCE_DIR="$1" BINARY_DIR="$2"
source "$SOURCE_DIR/tests/package/lib.sh"
[[ -x /usr/bin/python3 ]] && /usr/bin/python3 -c 'import venv, ensurepip' 2> /dev/null ||
  skip "Debian's python3-venv is not installed (scripts/install-deps.sh installs it)"

whl="$(ls "$PKG_DIST"/meshrun-*-py3-none-manylinux_*_x86_64.whl 2>/dev/null | head -1)"
[[ -n "$whl" ]] || fail "no manylinux wheel in $PKG_DIST (the \"package: dist\" test makes it)"
step "the tag: $(basename "$whl")"
tools="$BINARY_DIR/package-tools/venv/bin"
"$tools/auditwheel" show "$whl" | tee "$PKG_TEST/auditwheel-show.txt"
tag="$(basename "$whl" | sed -E 's/.*-(manylinux_[0-9]+_[0-9]+_x86_64)\.whl$/\1/')"
tr -s ' \n' ' ' < "$PKG_TEST/auditwheel-show.txt" | grep -q "constrains the platform tag to \"$tag\"" ||
  fail "the wheel's tag $tag is not the floor auditwheel finds"
# The floor matches the newest glibc symbol of the programs inside.
rm -rf "$PKG_TEST/wheel-files" && python3 -m zipfile -e "$whl" "$PKG_TEST/wheel-files"
newest="$(objdump -T "$PKG_TEST"/wheel-files/meshrun-*.data/scripts/meshrun* | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -Vu | tail -1)"
[[ "$tag" == "manylinux_${newest/./_}_x86_64" ]] || fail "tag $tag, but the newest glibc symbol is $newest"

venv="$PKG_TEST/venv"
rm -rf "$venv"
on_exit "rm -rf '$venv'"
step "a fresh venv: pip install $(basename "$whl")"
/usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" install -q --no-index --disable-pip-version-check "$whl"
[[ -x "$venv/bin/meshrun" && -x "$venv/bin/meshrun-worker-shim" ]] || fail "meshrun and its shim are not in the venv's bin/"
"$venv/bin/meshrun" --version

prog="$PKG_TEST/which_python.py"
cat > "$prog" <<'PY'
import os, sys
print(f"rank={os.environ['RANK']} executable={sys.executable} prefix={sys.prefix}", flush=True)
PY
# Started by path, with the venv neither active nor on PATH.
step "the venv's meshrun runs .py programs with the venv's python"
out="$(cd / && env -u PYTHON_EXEC -u VIRTUAL_ENV PATH=/usr/bin:/bin timeout 60 "$venv/bin/meshrun" --standalone --nproc_per_node=2 "$prog" 2>&1)" ||
  { echo "$out"; fail "the venv's meshrun failed"; }
echo "$out" | grep 'rank='
[[ "$(grep -c "executable=$venv/bin/python3 prefix=$venv\$" <<< "$out")" == 2 ]] ||
  fail "the workers did not run under $venv/bin/python3"
step "PYTHON_EXEC still wins"
out="$(cd / && PYTHON_EXEC=/usr/bin/python3 PATH=/usr/bin:/bin timeout 60 "$venv/bin/meshrun" --standalone --nproc_per_node=2 "$prog" 2>&1)" ||
  { echo "$out"; fail "the venv's meshrun with PYTHON_EXEC failed"; }
[[ "$(grep -c "executable=/usr/bin/python3 prefix=/usr\$" <<< "$out")" == 2 ]] || { echo "$out"; fail "PYTHON_EXEC=/usr/bin/python3 was not used"; }
echo "PASS: $(basename "$whl") installs in a venv and runs Python with the venv's interpreter"
