#!/usr/bin/env bash
# Make sure the Debian/Ubuntu packages a target needs are installed: the one place the build provisions the machine.
#   tools/ensure-system-packages.sh GROUP...   (groups: venv latex office sandbox browser http)
# Installs what is missing with apt-get when it can (root, or sudo without a
# password); otherwise stops and prints the one command the user must run.
# Another apt or dpkg (unattended upgrades, a second make) may hold the package lock: apt-get waits for it
# (APT_LOCK_TIMEOUT seconds, 600 by default) instead of failing at once.
set -euo pipefail

APT_LOCK_TIMEOUT=${APT_LOCK_TIMEOUT:-600}

missing=()
need() { missing+=("$@"); }

check_group() {
  case "$1" in
    venv)
      python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need python3-venv ;;
    latex)
      command -v latexmk >/dev/null 2>&1 || need latexmk
      command -v pdflatex >/dev/null 2>&1 || need texlive-latex-base
      for sty in booktabs.sty natbib.sty; do
        kpsewhich "$sty" >/dev/null 2>&1 || { need texlive-latex-recommended; break; }
      done
      for sty in enumitem.sty xcolor.sty; do
        kpsewhich "$sty" >/dev/null 2>&1 || { need texlive-latex-extra; break; }
      done
      kpsewhich lmodern.sty >/dev/null 2>&1 || need lmodern
      kpsewhich pcrr8t.tfm >/dev/null 2>&1 || need texlive-fonts-recommended
      # pdftotext and pdfinfo read a typeset PDF back (its label on every page).
      command -v pdftotext >/dev/null 2>&1 || need poppler-utils ;;
    office)
      command -v soffice >/dev/null 2>&1 || need libreoffice-calc-nogui libreoffice-writer-nogui
      # Impress renders a delivered slide deck (.pptx) for the graders; libslideshowlo.so is its own (Draw, which Impress
      # pulls in, ships the shared libsdlo.so, so that one does not tell whether Impress is there).
      if command -v soffice >/dev/null 2>&1; then
        [ -e "$(dirname "$(readlink -f "$(command -v soffice)")")/libslideshowlo.so" ] || need libreoffice-impress-nogui
      else
        need libreoffice-impress-nogui
      fi ;;
    sandbox)
      command -v bwrap >/dev/null 2>&1 || need bubblewrap
      # socat bridges the model proxy and the portal into the agent's network namespace.
      command -v socat >/dev/null 2>&1 || need socat ;;
    browser)
      command -v chromium >/dev/null 2>&1 || need chromium ;;
    http)
      # The portal tests sign in with wget and curl as a worker's script would.
      command -v wget >/dev/null 2>&1 || need wget
      command -v curl >/dev/null 2>&1 || need curl ;;
    *)
      echo "ensure-system-packages: unknown group '$1' (known: venv latex office sandbox browser http)" >&2
      exit 2 ;;
  esac
}

for group in "$@"; do check_group "$group"; done
[ ${#missing[@]} -eq 0 ] && exit 0

# De-duplicate, keep order.
mapfile -t pkgs < <(printf '%s\n' "${missing[@]}" | awk '!seen[$0]++')
cmd=(apt-get install -y --no-install-recommends "${pkgs[@]}")

if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo)
else
  echo "Missing system packages: ${pkgs[*]}" >&2
  echo "Run this once, then try again:" >&2
  echo "  sudo apt-get update && sudo ${cmd[*]}" >&2
  exit 1
fi

# apt-get with the lock wait: DPkg::Lock::Timeout covers dpkg's lock; the package lists' lock of `apt-get update`
# is retried here until the same deadline, so a lock held by another apt never fails the build at once.
apt() {
  local deadline=$((SECONDS + APT_LOCK_TIMEOUT)) err
  err=$(mktemp)
  until "${sudo[@]}" apt-get -o "DPkg::Lock::Timeout=$APT_LOCK_TIMEOUT" "$@" 2>"$err"; do
    if grep -qiE 'could not get lock|unable to lock|is held by process' "$err" && [ $SECONDS -lt $deadline ]; then
      echo "ensure-system-packages: another apt holds the package lock; waiting" >&2
      sleep 5
    else
      cat "$err" >&2
      rm -f "$err"
      return 1
    fi
  done
  cat "$err" >&2
  rm -f "$err"
}

echo "Installing system packages: ${pkgs[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt update -qq
apt "${cmd[@]:1}" -qq
