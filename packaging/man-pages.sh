#!/usr/bin/env bash
# The manual pages, made from meshrun's own --help with help2man (Debian's
# help2man), so that they never drift from the flags: meshrun(1) and one page
# per subcommand (meshrun-server(1), meshrun-status(1), meshrun-mesh(1)),
# each gzip -9n. Reproducible: help2man dates them from SOURCE_DATE_EPOCH.
#   usage: packaging/man-pages.sh MESHRUN_BINARY OUT_DIR
set -euo pipefail
[[ $# == 2 ]] || { echo "usage: $0 MESHRUN_BINARY OUT_DIR" >&2; exit 2; }
meshrun="$1" out="$2"
command -v help2man > /dev/null || { echo "man-pages: help2man is not installed (scripts/install-deps.sh installs it)" >&2; exit 1; }
version="$("$meshrun" --version | head -1)"
mkdir -p "$out"
cat > "$out/see-also.h2m" <<'H2M'
[SEE ALSO]
.BR meshrun (1),
.BR meshrun-server (1),
.BR meshrun-status (1),
.BR meshrun-mesh (1).
The user guide and the deployment guide are in /usr/share/doc/meshrun/ (the archive:
share/doc/meshrun/).
H2M
page() {  # page NAME HELP_OPTION DESCRIPTION
  local name="$1" help="$2" what="$3" upper
  upper="$(tr '[:lower:]' '[:upper:]' <<< "$name")"
  help2man --no-info --section 1 --name "$what" --version-string "$version" --help-option "$help" \
    --no-discard-stderr --include "$out/see-also.h2m" "$meshrun" | sed -e "s/^\.TH MESHRUN /.TH $upper /" > "$out/$name.1.tmp"
  # The NAME line names the page's command.
  sed -i "/^\.SH NAME/{n;s/^meshrun \\\\-/${name//-/\\\\-} \\\\-/}" "$out/$name.1.tmp"
  gzip -9n -c "$out/$name.1.tmp" > "$out/$name.1.gz"
  rm -f "$out/$name.1.tmp"
}
page meshrun --help "launch multi-process, multi-host jobs (torchrun's command line)"
page meshrun-server "server --help" "meshrun's rendezvous server as a daemon"
page meshrun-status "status --help" "show a run as meshrun's rendezvous server sees it"
page meshrun-mesh "mesh --help" "print the device mesh layout a job would get"
rm -f "$out/see-also.h2m"
