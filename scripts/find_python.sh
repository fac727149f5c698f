#!/usr/bin/env bash
# Print the command of a Python for nbcompile's make targets, found by name, never by a machine path.
#   find_python.sh newest   the newest Python >= 3.12 (make test, make lab): python3.14, python3.13,
#                           python3.12 on the PATH, then pyenv's installed versions where pyenv is
#   find_python.sh 3.11     a Python 3.11 (make test-compat): python3.11, python3 if it is 3.11, pyenv's
# Prints nothing and exits 1 (with the Python to install on stderr) when none is found.
set -u
want=${1:-newest}

works() {  # the command runs, and is the minor version asked for ("" = any >= 3.12)
  local minor
  minor=$("$@" -c 'import sys; print(sys.version_info[1] if sys.version_info[0] == 3 else 0)' 2>/dev/null) || return 1
  if [ "$want" = newest ]; then [ "$minor" -ge 12 ]; else [ "3.$minor" = "$want" ]; fi
}

if [ "$want" = newest ]; then names="python3.14 python3.13 python3.12"; else names="python$want python3"; fi
for name in $names; do
  if command -v "$name" >/dev/null 2>&1 && works "$name"; then command -v "$name"; exit 0; fi
done

# pyenv: its shims refuse a version that is not selected, so ask pyenv for its installed ones
if command -v pyenv >/dev/null 2>&1; then
  if [ "$want" = newest ]; then pattern='^3\.(1[2-9]|[2-9][0-9])\.[0-9]+$'; else pattern="^${want//./\\.}\\.[0-9]+\$"; fi
  for version in $(pyenv versions --bare 2>/dev/null | grep -E "$pattern" | sort -t. -k1,1nr -k2,2nr -k3,3nr); do
    candidate="$(pyenv prefix "$version" 2>/dev/null)/bin/python"
    if [ -x "$candidate" ] && works "$candidate"; then echo "$candidate"; exit 0; fi
  done
fi

if [ "$want" = newest ]; then
  echo "nbcompile: no Python >= 3.12 found (tried python3.14, python3.13, python3.12 and pyenv): install Python 3.13 (e.g. 'pyenv install 3.13' or your distribution's python3.13 package) -- JAX 0.11 and later need Python >= 3.12" >&2
else
  echo "nbcompile: no Python $want found (tried python$want, python3 and pyenv): install Python $want (e.g. 'pyenv install $want') for the oldest supported stack (JAX 0.10.2)" >&2
fi
exit 1
