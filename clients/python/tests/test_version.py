"""One version everywhere: pyproject.toml's, dex.__version__ and the extension's default_version
in dex.control (the SDK is released with the extension). Needs no database."""

import os
import re
import tomllib

import dex

HERE = os.path.dirname(os.path.abspath(__file__))
PYPROJECT = os.path.join(HERE, "..", "pyproject.toml")
CONTROL = os.path.join(HERE, "..", "..", "..", "dex.control")


def control_default_version():
    with open(CONTROL, encoding="utf-8") as f:
        found = re.findall(r"^\s*default_version\s*=\s*'([^']*)'", f.read(), re.MULTILINE)
    assert len(found) == 1, f"{CONTROL}: expected one default_version line, found {found}"
    return found[0]


def test_versions_agree():
    with open(PYPROJECT, "rb") as f:
        pyproject = tomllib.load(f)["project"]["version"]
    versions = {"pyproject.toml": pyproject, "dex.__version__": dex.__version__,
                "dex.control default_version": control_default_version()}
    assert len(set(versions.values())) == 1, f"versions differ: {versions}"


def test_package_is_the_source_tree():
    # conftest.py puts clients/python first on sys.path: the checks above are of this tree's
    # package, not of a copy installed elsewhere.
    assert os.path.dirname(os.path.abspath(dex.__file__)) == os.path.abspath(
        os.path.join(HERE, "..", "dex"))
