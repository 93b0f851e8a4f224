#!/usr/bin/env python3
"""Checks that the packaging says the version dex.control says.

dex.control's default_version is the one place a release changes the version; the packaging
follows it:
- debian/changelog: the upstream part of the newest entry's version (1.9 of 1.9-1) is
  default_version;
- META.json (PGXN, meta-spec 1.0.0): it parses, has the keys the spec requires, and its version
  and provides.dex.version are default_version as a semantic version (1.9 -> 1.9.0, as PGXN
  requires three numbers); provides.dex.file exists.
Exits 1, naming each fault, if one fails.

Usage: python3 test/packaging.py [ROOT]   (ROOT: the top of the tree; default: this file's ../)
"""

import json
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
REQUIRED_META = ("name", "abstract", "version", "maintainer", "license", "provides", "meta-spec")


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def default_version():
    m = re.search(r"^default_version\s*=\s*'([^']+)'", read("dex.control"), re.M)
    if not m:
        raise SystemExit("test/packaging.py: dex.control has no default_version")
    return m.group(1)


def changelog_version():
    """The upstream version of debian/changelog's first entry: no epoch, no Debian revision."""
    first = read("debian/changelog").split("\n", 1)[0]
    m = re.match(r"^[a-z0-9][a-z0-9+.-]*\s+\(([^)\s]+)\)", first)
    if not m:
        return None
    version = m.group(1).split(":", 1)[-1]
    return version.rsplit("-", 1)[0] if "-" in version else version


def semver(version):
    """default_version as PGXN wants it: MAJOR.MINOR.PATCH."""
    parts = version.split(".")
    return ".".join(parts + ["0"] * (3 - len(parts)))


def check():
    faults = []
    want = default_version()

    got = changelog_version()
    if got is None:
        faults.append("debian/changelog: the first line is not 'package (version) ...'")
    elif got != want:
        faults.append(f"debian/changelog: the newest entry is for {got}, dex.control's default_version is "
                      f"{want} (add an entry {want}-1)")

    try:
        meta = json.loads(read("META.json"))
    except (OSError, ValueError) as e:
        return faults + [f"META.json: {e}"]
    faults += [f"META.json: no {key}" for key in REQUIRED_META if key not in meta]
    if meta.get("meta-spec", {}).get("version") != "1.0.0":
        faults.append("META.json: meta-spec.version is not 1.0.0")
    if meta.get("name") != "dex":
        faults.append(f"META.json: name is {meta.get('name')!r}, not 'dex'")
    if meta.get("version") != semver(want):
        faults.append(f"META.json: version is {meta.get('version')!r}, dex.control's default_version is "
                      f"{want} ({semver(want)})")
    provided = meta.get("provides", {}).get("dex")
    if not isinstance(provided, dict):
        faults.append("META.json: provides has no dex")
    else:
        if provided.get("version") != semver(want):
            faults.append(f"META.json: provides.dex.version is {provided.get('version')!r}, not {semver(want)}")
        if not os.path.isfile(os.path.join(ROOT, provided.get("file", ""))):
            faults.append(f"META.json: provides.dex.file {provided.get('file')!r} is not a file")
    pg = meta.get("prereqs", {}).get("runtime", {}).get("requires", {}).get("PostgreSQL")
    if not pg:
        faults.append("META.json: prereqs.runtime.requires has no PostgreSQL")
    return faults


def main():
    faults = check()
    for fault in faults:
        print(f"test/packaging.py: {fault}")
    if faults:
        return 1
    print(f"test/packaging.py: debian/changelog and META.json are at {default_version()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
