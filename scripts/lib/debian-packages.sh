# Sourced by the scripts that install Debian packages (install-deps.sh,
# gather-corpus.sh): which packages of a list are missing, and installing them
# non-interactively (apt-get update once, no recommends; through sudo when not
# root). Nothing runs when nothing is missing, so callers stay idempotent and
# offline on a machine that has everything.

# True when Debian package $1 is installed.
debian_package_installed() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

# debian_install WHO PKG...: installs PKG..., saying "WHO: installing PKG..." on stderr.
debian_install() {
  local who="$1"
  shift
  echo "$who: installing $*" >&2
  local sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
