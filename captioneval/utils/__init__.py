"""Django-free helpers shared by every layer of the platform.

``captioneval.utils`` sits with the other Django-free cores (:mod:`captioneval.kernels`,
:mod:`captioneval.stats`) just above the settings: it imports only the standard library, never
Django, Celery or an app of the platform, so any layer may import it (``tests/test_layering.py``
checks this).

Modules:

* :mod:`captioneval.utils.csvsafe` -- CSV cells a spreadsheet will not run as formulas (OWASP "CSV
  Injection"), with an exact way back.
"""
