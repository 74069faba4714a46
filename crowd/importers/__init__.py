"""Importers that turn published human-judgment datasets into :mod:`crowd` rows.

``IMPORTERS`` maps the dataset kind used on the command line
(``manage.py import_dataset <kind> <dir> --name <name>``) to an importer function
``f(directory: Path, name: str, **options) -> ImportSummary``. ``IMPORTER_OPTIONS`` lists, per kind,
the keyword options its function accepts (``import_dataset --references N --seed S`` for
PASCAL-50S); kinds not listed take none.
"""
from .base import DatasetExistsError, DatasetFormatError, ImportSummary
from .flickr8k import import_flickr8k_crowdflower, import_flickr8k_expert
from .pascal50s import import_pascal50s
from .thumb import import_thumb

IMPORTERS = {
    "flickr8k-expert": import_flickr8k_expert,
    "flickr8k-crowdflower": import_flickr8k_crowdflower,
    "thumb": import_thumb,
    "pascal50s": import_pascal50s,
}

IMPORTER_OPTIONS = {
    "pascal50s": ("references", "seed"),
}

__all__ = ["IMPORTERS", "IMPORTER_OPTIONS", "DatasetExistsError", "DatasetFormatError", "ImportSummary"]
