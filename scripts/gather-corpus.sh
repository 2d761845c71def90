#!/usr/bin/env bash
# Gathers the default model's training corpus from Debian documentation packages.
#
# Installs the documentation packages listed below (Debian 12; apt-get, as root or
# through sudo), then runs training/build_corpus.py, which extracts, normalizes,
# de-duplicates and splits their English text and writes
#   .cache/corpus/train.txt, .cache/corpus/heldout.txt, .cache/corpus/manifest.json
# (or under the folder given as $1). Deterministic: the same package versions give
# byte-identical files; the manifest records versions, sizes and SHA-256 digests.
# docs/default-model.md lists the packages and their licenses.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/lib/debian-packages.sh"
OUT="${1:-$ROOT/.cache/corpus}"

# Keep in sync with SOURCES in training/build_corpus.py.
PACKAGES=(
  python3.11-doc        # Python 3.11 docs, reStructuredText sources (PSF-2.0)
  python-django-doc     # Django 3.2 docs, HTML reduced to text (BSD-3-Clause)
  perl-doc              # Perl 5.36 POD manuals (GPL-1+ or Artistic)
  python-sqlalchemy-doc # SQLAlchemy 1.4 docs, reStructuredText (MIT)
  git-doc               # Git manuals and guides, AsciiDoc (GPL-2)
  jargon-text           # The Jargon File 4.4.7 (public domain)
  debian-reference-en   # Debian Reference, plain text (GPL-2+)
  sphinx-doc            # Sphinx 5.3 docs, reStructuredText (BSD-2-Clause)
  developers-reference  # Debian Developer's Reference, reStructuredText (GPL-2)
)

missing=()
for p in "${PACKAGES[@]}"; do
  debian_package_installed "$p" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
  debian_install gather-corpus "${missing[@]}"
fi

python3 "$ROOT/training/build_corpus.py" --out "$OUT"
ls -l "$OUT"
