# shellcheck shell=bash
# ft_hsdp_log.sh: what examples/ft_hsdp's output says, for shell tests.
#
#   step_went_back LOG RANK   # prints "A -> B" when local rank RANK's committed steps in an
#                             # agent's LOG ever go back (a group that started over), else
#                             # nothing
step_went_back() {
  grep -o "n0:r$2\] step [0-9]* quorum" "$1" | awk '{ print $3 }' |
    awk 'NR > 1 && $1 < prev { print prev " -> " $1; exit } { prev = $1 }'
}
