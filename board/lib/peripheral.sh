# Sourced by board/*/dtb.sh: the one step every board's device-tree change shares.
# shellcheck shell=sh
#
# set_peripheral DTB NODE COMPAT_PATTERN WHAT: checks that NODE in DTB is the controller we
# expect (its compatible matches COMPAT_PATTERN, a case pattern; WHAT names it in errors) and
# is a host or already a peripheral, then sets dr_mode = "peripheral" and checks it took.
# Sets $before for the caller's report. Needs die() from the caller.
set_peripheral() {
  compat=$(fdtget "$1" "$2" compatible 2>/dev/null) || die "$1: no node $2"
  # shellcheck disable=SC2254  # the pattern is the caller's, on purpose
  case "$compat" in
    $3) ;;
    *) die "$1: $2 is \"$compat\", not $4" ;;
  esac
  before=$(fdtget "$1" "$2" dr_mode 2>/dev/null || echo "(unset)")
  case "$before" in
    host|peripheral) ;;
    *) die "$1: $2 dr_mode is $before; expected host (refusing to guess)" ;;
  esac
  fdtput -t s "$1" "$2" dr_mode peripheral
  [ "$(fdtget "$1" "$2" dr_mode)" = peripheral ] || die "$1: dr_mode is still not peripheral"
}
