"""Metadata hook of captioneval-server (``[tool.hatch.metadata.hooks.custom]`` of pyproject.toml).

The platform is released with the library: its version is ``[project] version`` of the repository's
pyproject.toml, and its dependencies are ``captioneval[metrics]`` at that version plus that file's
``server`` extra (locked, with the rest, in requirements/server.txt), so neither is written twice.
"""
from __future__ import annotations

import tomllib
from pathlib import Path

from hatchling.metadata.plugin.interface import MetadataHookInterface


class ServerMetadata(MetadataHookInterface):
    """Fills ``version`` and ``dependencies`` from ``../pyproject.toml``."""

    def update(self, metadata: dict) -> None:
        """Set the dynamic fields of ``metadata``."""
        library = tomllib.loads((Path(self.root).parent / "pyproject.toml").read_text("utf-8"))["project"]
        metadata["version"] = library["version"]
        metadata["dependencies"] = [f"captioneval[metrics]=={library['version']}",
                                    *library["optional-dependencies"]["server"]]
