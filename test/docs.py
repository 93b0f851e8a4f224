#!/usr/bin/env python3
"""Checks that the manual holds together (README.md, docs/*.md, the READMEs of src/, bench/ and
the SDKs): every relative link names a file of the tree, and a heading of it when it has an
anchor; every file of docs/ is linked from README.md; every path in backquotes that looks like
one of the tree's (a file of test/, src/, sql/, docs/, examples/, bench/, clients/, contrib/)
exists, from the top or from the document's folder, unless the build makes it (a .gitignore
names it).  Exits 1, naming each fault, if one fails.

Usage: python3 test/docs.py [ROOT]   (ROOT: the top of the tree; default: this file's ../)
"""

import fnmatch
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE_PATH = re.compile(r"`((?:test|src|sql|docs|examples|bench|clients|contrib)/[A-Za-z0-9_./-]+)`")
HEADING = re.compile(r"^#+\s+(.*?)\s*$", re.M)


def anchor(title):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as dashes."""
    title = re.sub(r"`", "", title.lower())
    title = re.sub(r"[^\w\- ]", "", title)
    return title.replace(" ", "-")


def ignore_patterns():
    """The patterns of every .gitignore of the tree, each with the folder it applies in."""
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in (".git", "node_modules")]
        if ".gitignore" in files:
            with open(os.path.join(folder, ".gitignore"), encoding="utf-8") as f:
                for line in f:
                    line = line.strip()
                    if line and not line.startswith("#"):
                        found.append((os.path.relpath(folder, ROOT), line))
    return found


IGNORED = None


def generated(p):
    """Whether p is something the build or a run makes (a .gitignore names it), not a file of
    the tree.  (Read here rather than asked of git: the tests may run as another user, whom git
    does not trust with the checkout.)"""
    global IGNORED
    if IGNORED is None:
        IGNORED = ignore_patterns()
    parts = p.rstrip("/").split("/")
    for folder, pattern in IGNORED:
        base = [] if folder == "." else folder.split("/")
        if parts[:len(base)] != base:
            continue
        rest = parts[len(base):]
        pat = pattern.rstrip("/")
        if pat.startswith("/") or "/" in pat:
            anchored = pat.lstrip("/").split("/")
            if len(rest) >= len(anchored) and all(
                    fnmatch.fnmatch(r, a) for r, a in zip(rest, anchored)):
                return True
        elif any(fnmatch.fnmatch(r, pat) for r in rest):
            return True
    return False


def manual_files():
    files = [os.path.join(ROOT, "README.md")]
    docs = os.path.join(ROOT, "docs")
    if os.path.isdir(docs):
        files += sorted(os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))
    for extra in ("src/README.md", "bench/README.md", "clients/python/README.md",
                  "clients/typescript/README.md"):
        if os.path.exists(os.path.join(ROOT, extra)):
            files.append(os.path.join(ROOT, extra))
    return files


def main():
    faults = []
    anchors = {}
    texts = {}
    for path in manual_files():
        with open(path, encoding="utf-8") as f:
            texts[path] = f.read()
        anchors[path] = {anchor(h) for h in HEADING.findall(texts[path])}
    for path, text in texts.items():
        rel = os.path.relpath(path, ROOT)
        for target in LINK.findall(text):
            if re.match(r"^[a-z]+:", target):
                continue                    # http:, https:, mailto:
            file_part, _, frag = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            if not os.path.exists(dest):
                faults.append(f"{rel}: link to {target}: no file {os.path.relpath(dest, ROOT)}")
            elif frag and dest in anchors and frag not in anchors[dest]:
                faults.append(f"{rel}: link to {target}: {os.path.relpath(dest, ROOT)} has no heading #{frag}")
        for p in CODE_PATH.findall(text):
            p = p.rstrip(".")
            if "*" in p or "<" in p or generated(p):
                continue
            if not (os.path.exists(os.path.join(ROOT, p)) or
                    os.path.exists(os.path.join(os.path.dirname(path), p))):
                faults.append(f"{rel}: `{p}` does not exist")
    readme = texts.get(os.path.join(ROOT, "README.md"), "")
    docs = os.path.join(ROOT, "docs")
    if os.path.isdir(docs):
        for f in sorted(os.listdir(docs)):
            if f.endswith(".md") and f"docs/{f}" not in readme:
                faults.append(f"README.md does not link docs/{f}")
    for fault in faults:
        print(f"docs: {fault}")
    print(f"docs: {len(texts)} files, {len(faults)} faults")
    return 1 if faults else 0


if __name__ == "__main__":
    sys.exit(main())
