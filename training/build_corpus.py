#!/usr/bin/env python3
"""Builds the default model's text corpus from installed Debian documentation.

Called by scripts/gather-corpus.sh after it has installed the packages listed in
SOURCES (that script owns the apt-get side). Standard library only, so it runs on
any Debian 12 machine with python3.

For every package it lists the package's files with `dpkg -L`, keeps the ones that
match the source's path pattern, turns each into plain UTF-8 text (HTML pages are
reduced to their article text), normalizes it (NFC, LF line ends, tabs expanded,
no-break spaces made plain, control characters and trailing spaces removed, runs of
blank lines collapsed),
splits very large files into ~48 KB pieces at paragraph boundaries, drops
low-quality and exactly duplicated documents, and writes, in a fixed order:

  OUT/train.txt     documents separated by the line "<|endoftext|>"
  OUT/heldout.txt   same format; 2% of the bytes, chosen by document
  OUT/manifest.json packages (version, license, files, documents, characters),
                    output sizes and SHA-256 digests, split parameters

The held-out split is by document: documents are ordered by
sha256("pagedkv-corpus-v1\\0" + document id) and taken in that order until they
hold 2% of all characters. The document id is "package:path#piece", so the split
does not depend on the order in which files are read.
"""

import argparse
import gzip
import hashlib
import html.parser
import json
import os
import re
import subprocess
import sys
import unicodedata

SEPARATOR = "<|endoftext|>"
SPECIAL_STRINGS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
SPLIT_SEED = "pagedkv-corpus-v1"
HELDOUT_FRACTION = 0.02
PIECE_MIN_CHARS = 32_000  # large files are cut into pieces of at least this
PIECE_SPLIT_ABOVE = 64_000  # ... when they are longer than this
MIN_DOC_CHARS = 200

# (package, license, regex over `dpkg -L` paths, reader)
SOURCES = [
    ("python3.11-doc", "PSF-2.0 (Python Software Foundation License)",
     r"/html/_sources/.*\.rst\.txt$", "text"),
    ("python-django-doc", "BSD-3-Clause",
     r"/html/(?!_modules/|_static/|_images/|genindex|py-modindex|search\.html|contents\.html).*\.html$",
     "html"),
    ("perl-doc", "GPL-1.0-or-later OR Artistic-1.0-Perl", r"/pod/[^/]*\.pod$", "text"),
    ("python-sqlalchemy-doc", "MIT (Expat)", r"/rst/.*\.rst$", "text"),
    ("git-doc", "GPL-2.0-only", r"^/usr/share/doc/git-doc/[^/]*\.txt$", "text"),
    ("jargon-text", "public domain", r"/jargon\.txt\.gz$", "gzip"),
    ("debian-reference-en", "GPL-2.0-or-later", r"/debian-reference\.en\.txt\.gz$", "gzip"),
    ("sphinx-doc", "BSD-2-Clause", r"/html/_sources/.*\.rst\.txt$", "text"),
    ("developers-reference", "GPL-2.0-only", r"/_sources/.*\.rst\.txt$", "text"),
]


class ArticleText(html.parser.HTMLParser):
    """Extracts readable text from a Sphinx-generated Django documentation page.

    Only the article (the <div class="yui-g"> that holds the page body) is kept;
    navigation, scripts, styles and the pilcrow "headerlink" anchors are dropped.
    Block elements become line breaks, <pre> keeps its whitespace.
    """

    BLOCK = {"p", "div", "section", "pre", "li", "dt", "dd", "tr", "table", "ul", "ol", "dl",
             "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "br", "hr"}
    SKIP = {"script", "style"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts = []
        self.depth = 0  # nesting depth inside the article div, 0 = outside
        self.skip = 0
        self.pre = 0
        self.headerlink = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if self.depth == 0:
            if tag == "div" and "yui-g" in (a.get("class") or "").split():
                self.depth = 1
            return
        if tag == "div":
            self.depth += 1
        if tag in self.SKIP:
            self.skip += 1
        if tag == "a" and "headerlink" in (a.get("class") or "").split():
            self.headerlink += 1
        if tag == "pre":
            self.pre += 1
        if tag in self.BLOCK:
            self.parts.append("\n\n" if tag in ("p", "pre", "h1", "h2", "h3", "h4", "dl") else "\n")
        if tag in ("h1", "h2", "h3"):
            self.parts.append("# " if tag == "h1" else "## " if tag == "h2" else "### ")
        if tag == "li":
            self.parts.append("* ")

    def handle_endtag(self, tag):
        if self.depth == 0:
            return
        if tag == "div":
            self.depth -= 1
        if tag in self.SKIP and self.skip:
            self.skip -= 1
        if tag == "a" and self.headerlink:
            self.headerlink -= 1
        if tag == "pre" and self.pre:
            self.pre -= 1
        if tag in self.BLOCK:
            self.parts.append("\n")

    def handle_data(self, data):
        if self.depth == 0 or self.skip or self.headerlink:
            return
        if not self.pre:
            data = re.sub(r"\s+", " ", data)
            if not self.parts or self.parts[-1].endswith("\n"):
                data = data.lstrip()
        if data:
            self.parts.append(data)

    def text(self):
        t = "".join(self.parts)
        return re.sub(r"[ \t]+\n", "\n", t)


_CONTROL = re.compile("[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u200b-\u200f\u2028\u2029\ufeff\ufffd]")


def decode(raw):
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("cp1252", errors="replace") if b"\x81" not in raw else raw.decode("latin-1")


def normalize(text):
    """Canonical plain text: NFC, LF, no control characters, no trailing spaces."""
    text = unicodedata.normalize("NFC", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\u00a0", " ")
    for s in SPECIAL_STRINGS:
        text = text.replace(s, "")
    lines = []
    for line in text.split("\n"):
        line = _CONTROL.sub("", line.expandtabs(8)).rstrip()
        # Very long lines without spaces are encoded data, not prose.
        if len(line) > 400 and line.count(" ") < len(line) / 50:
            continue
        lines.append(line)
    text = "\n".join(lines)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip("\n")


def good_enough(text):
    if len(text) < MIN_DOC_CHARS:
        return False
    letters = sum(1 for c in text if c.isalpha())
    return letters / len(text) >= 0.35


def pieces(text):
    """Cuts a long document at paragraph boundaries into pieces >= PIECE_MIN_CHARS."""
    if len(text) <= PIECE_SPLIT_ABOVE:
        return [text]
    out, cur, size = [], [], 0
    for para in text.split("\n\n"):
        cur.append(para)
        size += len(para) + 2
        if size >= PIECE_MIN_CHARS:
            out.append("\n\n".join(cur))
            cur, size = [], 0
    if cur:
        if out and size < PIECE_MIN_CHARS // 2:
            out[-1] = out[-1] + "\n\n" + "\n\n".join(cur)
        else:
            out.append("\n\n".join(cur))
    return out


def package_files(pkg, pattern):
    out = subprocess.run(["dpkg", "-L", pkg], check=True, capture_output=True, text=True).stdout
    rx = re.compile(pattern)
    files = sorted({p for p in out.splitlines()
                    if rx.search(p) and os.path.isfile(p) and not os.path.islink(p)})
    return files


def package_version(pkg):
    return subprocess.run(["dpkg-query", "-W", "-f", "${Version}", pkg], check=True,
                          capture_output=True, text=True).stdout.strip()


def read_source(path, reader):
    with open(path, "rb") as f:
        raw = f.read()
    if reader == "gzip":
        raw = gzip.decompress(raw)
    text = decode(raw)
    if reader == "html":
        p = ArticleText()
        p.feed(text)
        p.close()
        text = p.text()
    return text


def split_heldout(docs, fraction, seed):
    """Returns the set of document ids held out: hash order, until `fraction` of chars."""
    total = sum(len(t) for _, t in docs)
    order = sorted(docs, key=lambda d: hashlib.sha256((seed + "\0" + d[0]).encode()).hexdigest())
    held, size = set(), 0
    for doc_id, text in order:
        if size >= fraction * total:
            break
        held.add(doc_id)
        size += len(text)
    return held


def write_docs(path, docs):
    h = hashlib.sha256()
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for _, text in docs:
            chunk = text + "\n" + SEPARATOR + "\n"
            f.write(chunk)
            h.update(chunk.encode("utf-8"))
    return {"path": os.path.basename(path), "bytes": os.path.getsize(path),
            "chars": sum(len(t) + len(SEPARATOR) + 2 for _, t in docs),
            "documents": len(docs), "sha256": h.hexdigest()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=".cache/corpus")
    ap.add_argument("--max-chars", type=int, default=48_000_000,
                    help="stop adding sources once this many characters are collected")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    seen = set()
    docs = []  # (doc_id, text) in source order
    packages = []
    total = 0
    for pkg, lic, pattern, reader in SOURCES:
        if total >= args.max_chars:
            print(f"corpus: skipping {pkg}: --max-chars reached", file=sys.stderr)
            continue
        files = package_files(pkg, pattern)
        if not files:
            sys.exit(f"corpus: package {pkg} has no files matching {pattern!r}")
        stats = {"package": pkg, "version": package_version(pkg), "license": lic,
                 "pattern": pattern, "files": len(files), "documents": 0, "chars": 0,
                 "dropped_low_quality": 0, "dropped_duplicate": 0}
        for path in files:
            text = normalize(read_source(path, reader))
            for i, piece in enumerate(pieces(text)):
                piece = piece.strip("\n")
                if not good_enough(piece):
                    stats["dropped_low_quality"] += 1
                    continue
                digest = hashlib.sha256(piece.encode("utf-8")).digest()
                if digest in seen:
                    stats["dropped_duplicate"] += 1
                    continue
                seen.add(digest)
                docs.append((f"{pkg}:{path}#{i}", piece))
                stats["documents"] += 1
                stats["chars"] += len(piece)
        total += stats["chars"]
        packages.append(stats)
        print(f"corpus: {pkg:24s} {stats['files']:5d} files {stats['documents']:5d} docs "
              f"{stats['chars'] / 1e6:7.2f} M chars", file=sys.stderr)

    held = split_heldout(docs, HELDOUT_FRACTION, SPLIT_SEED)
    train_docs = [d for d in docs if d[0] not in held]
    held_docs = [d for d in docs if d[0] in held]
    manifest = {
        "format": "UTF-8 text; each document is followed by a line holding only '<|endoftext|>'",
        "split": {"seed": SPLIT_SEED, "heldout_fraction_of_chars": HELDOUT_FRACTION,
                  "rule": "documents sorted by sha256(seed + '\\0' + doc_id), taken until "
                          "they hold the fraction of all characters; doc_id = package:path#piece"},
        "packages": packages,
        "train": write_docs(os.path.join(args.out, "train.txt"), train_docs),
        "heldout": write_docs(os.path.join(args.out, "heldout.txt"), held_docs),
        "heldout_doc_ids": sorted(held),
    }
    with open(os.path.join(args.out, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
        f.write("\n")
    for k in ("train", "heldout"):
        m = manifest[k]
        print(f"corpus: {k}.txt {m['bytes']} bytes, {m['documents']} documents, "
              f"sha256 {m['sha256']}", file=sys.stderr)


if __name__ == "__main__":
    main()
