"""Importers that turn published human-judgment datasets into :mod:`crowd` rows.

``IMPORTERS`` maps the dataset kind used on the command line
(``manage.py import_dataset <kind> <dir> --name <name>``) to an importer function
``f(directory: Path, name: str) -> ImportSummary``.
"""
from .base import DatasetExistsError, DatasetFormatError, ImportSummary
from .flickr8k import import_flickr8k_expert

IMPORTERS = {
    "flickr8k-expert": import_flickr8k_expert,
}

__all__ = ["IMPORTERS", "DatasetExistsError", "DatasetFormatError", "ImportSummary"]
