"""Importers that turn published human-judgment datasets into :mod:`crowd` rows.

Each importer is one module of this package holding a subclass of
:class:`~crowd.importers.base.Importer` that only parses; the base validates everything, writes in
one transaction and applies the idempotency and "name taken by other data" rules.

Registry: a subclass that declares ``format`` registers itself when its class is defined, and this
package imports every module in its folder (``pkgutil``), so a new importer is one new file:
``manage.py import_dataset <format> <dir> --name <name>`` finds it with no other edit.

``IMPORTERS`` maps the format name (``import_dataset``'s first argument) to an importer, called as
``importer(directory: Path, name: str, **options) -> ImportSummary``. ``IMPORTER_OPTIONS`` lists,
per format, the keyword options it accepts (``import_dataset --references N --seed S`` for
PASCAL-50S); formats not listed take none.
"""
import importlib
import pkgutil

from .base import REGISTRY, DatasetExistsError, DatasetFormatError, ImportSummary, Importer

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")

#: format name -> importer (the order in which the modules were found: alphabetical by file).
IMPORTERS: dict[str, Importer] = REGISTRY
#: format name -> names of its keyword options (formats without options are not listed).
IMPORTER_OPTIONS: dict[str, tuple[str, ...]] = {fmt: tuple(imp.options) for fmt, imp in REGISTRY.items() if imp.options}

__all__ = ["IMPORTERS", "IMPORTER_OPTIONS", "DatasetExistsError", "DatasetFormatError", "ImportSummary", "Importer"]
