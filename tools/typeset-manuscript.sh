#!/usr/bin/env bash
# Typeset the manuscript from generated files kept outside manuscript/ (a rehearsal's, a test's).
#   tools/typeset-manuscript.sh OUT GENERATED FIGURES
# OUT receives a copy of manuscript/main.tex, sections/ and references.bib, with
# generated/ and figures/ linked to GENERATED and FIGURES; the PDF is OUT/build/main.pdf
# and the LaTeX log OUT/build/latexmk.log. manuscript/ itself is only read.
#
# A copy, not TEXINPUTS: main.tex reads generated/, sections/ and figures/ relative
# to its own folder and leaves out whatever is missing (\InputIfFileExists), so a
# search path that also held manuscript/ would let a dry run's files there (the
# dry-run appendix, say) slip into this build. The copy sees only GENERATED and FIGURES.
# The stages' figure environments name their PDF relative to manuscript/
# (pilot.report.stage_outputs.figure_env), so manuscript/ is added to the graphics
# path at \begin{document}, after figures/; main.tex is copied unchanged.
set -euo pipefail

if [ $# -ne 3 ]; then
  echo "usage: $0 OUT GENERATED FIGURES" >&2
  exit 2
fi
here="$(cd "$(dirname "$0")/.." && pwd -P)"
src="$here/manuscript"
# realpath -m: the folder may not exist yet, and is checked before anything is made.
out="$(realpath -m "$1")"
generated="$(cd "$2" && pwd)"
figures="$(cd "$3" && pwd)"
case "$src" in
  *[[:space:]%#~\\{}]*) echo "$0: TeX cannot name files under '$src' (a space or one of % # ~ \\ { })" >&2; exit 2 ;;
esac
for tool in latexmk pdflatex; do
  command -v "$tool" >/dev/null || { echo "$0: $tool not found (tools/ensure-system-packages.sh latex)" >&2; exit 2; }
done

# The copy's sections/ is replaced below: never inside the manuscript it copies.
case "$out/" in
  "$src"/*) echo "$0: OUT must lie outside $src" >&2; exit 2 ;;
esac
mkdir -p "$out"
rm -rf "$out/sections" "$out/generated" "$out/figures"
cp "$src/main.tex" "$src/references.bib" "$out/"
cp -r "$src/sections" "$out/sections"
ln -s "$generated" "$out/generated"
ln -s "$figures" "$out/figures"
mkdir -p "$out/build"

cd "$out"
latexmk -pdf -interaction=nonstopmode -halt-on-error -outdir=build \
  -usepretex="\\AtBeginDocument{\\graphicspath{{figures/}{$src/}}}" main.tex >build/latexmk.log 2>&1 \
  || { tail -40 build/latexmk.log >&2; echo "$0: LaTeX failed; the log is $out/build/latexmk.log" >&2; exit 1; }
echo "wrote $out/build/main.pdf"
