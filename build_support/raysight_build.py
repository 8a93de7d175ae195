"""setuptools' build backend, with the dashboard's libraries: a wheel or an sdist is built only with them.

The libraries come from npm by their lock file (``npm ci`` in ``src/raysight/ui``), which a clone does not hold: a
build of a wheel or an sdist runs it when any is missing, and fails saying what to do when it cannot. An editable
install (``pip install -e .``, which the set-up command runs before npm is there) is left alone: its server says on
its pages and in its log what is missing. Which files are the libraries is the package data's to say
(``pyproject.toml``: those under ``ui/node_modules``), the files the wheel ships.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from setuptools import build_meta
from setuptools.build_meta import *  # noqa: F403 (every other hook as setuptools has it: editable builds too)

if sys.version_info >= (3, 11):
    import tomllib
else:  # (a build requirement there)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "raysight"
UI = PACKAGE / "ui"


def libraries() -> list[Path]:
    """The dashboard's libraries the wheel ships: the package data under ``ui/node_modules``."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["raysight"]
    return [PACKAGE / path for path in data if path.startswith("ui/node_modules/")]


def missing() -> list[str]:
    return [str(path.relative_to(UI / "node_modules")) for path in libraries() if not path.is_file()]


def ensure_libraries() -> None:
    """Install the dashboard's libraries (``npm ci``) where any is missing; raise saying what to do if that fails."""
    if not (absent := missing()):
        return
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError(
            f"raysight's dashboard libraries are not installed ({', '.join(absent)}) and npm is not on the PATH: "
            f"install npm (Debian: apt-get install npm), or run `npm ci` in {UI}, then build again"
        )
    print(f"installing the dashboard's libraries: npm ci in {UI}", file=sys.stderr)
    subprocess.run([npm, "ci", "--prefix", str(UI), "--no-audit", "--no-fund", "--loglevel=error"], check=True)
    if still := missing():
        raise RuntimeError(f"`npm ci` in {UI} did not install {', '.join(still)}: its lock file names other versions?")


def build_wheel(
    wheel_directory: str, config_settings: dict[str, Any] | None = None, metadata_directory: str | None = None
) -> str:
    ensure_libraries()
    return build_meta.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory: str, config_settings: dict[str, Any] | None = None) -> str:
    ensure_libraries()
    return build_meta.build_sdist(sdist_directory, config_settings)
