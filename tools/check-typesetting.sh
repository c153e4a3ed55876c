#!/usr/bin/env bash
# The typesetting gate of a built manuscript: the LaTeX log (overfull boxes, lines of badness 10000 in tables,
# undefined references) and the text of its figures (nothing printed under 7 pt). Both checks always run, so every
# fault is listed at once; when either fails, the PDF is moved aside (not deleted: it shows the fault) and the
# build fails, so a later `make` typesets it again instead of taking it as done.
#
#   tools/check-typesetting.sh PDF GENERATED_DIR FIGURES_DIR [PYTHON]
set -u
pdf="$1" generated="$2" figures="$3" python="${4:-python3}"
here="$(cd "$(dirname "$0")" && pwd)"
log="$(dirname "$pdf")/latexmk.log"
status=0
"$python" "$here/check_latex_log.py" "$log" || status=1
"$python" "$here/check_figure_text.py" "$generated" "$figures" || status=1
if [ "$status" -ne 0 ]; then
  failed="${pdf%.pdf}.failed-checks.pdf"
  mv -f "$pdf" "$failed"
  echo "$0: the typesetting checks failed (above); the PDF is kept as $failed" >&2
  exit 1
fi
