"""docs/architecture.md is the map of the code: every module of the project is named in it.

A module is named when the map's text holds its path (``crowd/engine.py``), or when a table row
whose first cell names its folder (``crowd/importers/`` or a file in it) names the file
(``flickr8k.py``; a management command also by its command name). A package is named by its
folder, or by a path inside it. Migrations are the apps' history, not modules one reads: they are left out.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAP = ROOT / "docs" / "architecture.md"
PACKAGES = ("captioneval", "crowd", "metrics", "analysis", "api", "evalsite", "evalcore")


def project_files(root: Path = ROOT) -> list[str]:
    """Every module file of the project (relative paths), and every package folder (ending in /)."""
    out = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root)
            if "migrations" in rel.parts or "__pycache__" in rel.parts:
                continue
            out.append(f"{rel.parent.as_posix()}/" if rel.name == "__init__.py" else rel.as_posix())
    return out


def unnamed(text: str, files: list[str]) -> list[str]:
    """The entries of ``files`` that the map ``text`` does not name (see the module docstring)."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|"):
            cells = line.split("|")
            first = cells[1] if len(cells) > 2 else ""
            dirs = set()
            for path in re.findall(r"`([\w./-]+)`", first):
                dirs.add(path if path.endswith("/") else path.rpartition("/")[0] + "/")
            rows.append((dirs, line))
    missing = []
    for f in files:
        if f"`{f}`" in text or re.search(rf"(?<![\w/]){re.escape(f)}(?![\w])", text):
            continue
        if f.endswith("/") and re.search(rf"(?<![\w/]){re.escape(f)}", text):  # a folder named with a path in it
            continue
        folder, _, name = f.rstrip("/").rpartition("/")
        folder += "/"
        names = {f"`{name}`", f"`{name}/`"}
        if name.endswith(".py") and "/management/commands" in folder:
            names.add(f"`{name[:-3]}`")
        if any(folder in dirs and any(n in line for n in names) for dirs, line in rows):
            continue
        missing.append(f)
    return missing


def test_the_map_names_every_module():
    files = project_files()
    assert "captioneval/metrics/registry.py" in files and "crowd/engine.py" in files and "api/" in files
    missing = unnamed(MAP.read_text("utf-8"), files)
    assert not missing, f"{len(missing)} module(s) not named in docs/architecture.md:\n" + "\n".join(missing)


def test_the_check_can_fail():
    text = "| `crowd/importers/` | `base.py` the skeleton; `flickr8k.py` |\n| `crowd/engine.py` | engine |\n"
    files = ["crowd/importers/base.py", "crowd/importers/flickr8k.py", "crowd/importers/thumb.py",
             "crowd/engine.py", "crowd/quality.py"]
    assert unnamed(text, files) == ["crowd/importers/thumb.py", "crowd/quality.py"]
