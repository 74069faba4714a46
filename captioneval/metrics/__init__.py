"""Metric classes: one object per metric behind one small interface, as sacrebleu's ``metrics``.

* :mod:`~captioneval.metrics.base` -- the interface (:class:`~captioneval.metrics.base.Metric`:
  key, version, level, what it needs, one scoring method, a signature);
* :mod:`~captioneval.metrics.builtin` -- one file per built-in metric, discovered automatically;
* :mod:`~captioneval.metrics.registry` -- every metric this installation knows, and the groups;
* :mod:`~captioneval.metrics.plugins` -- metrics contributed by other distributions through the
  ``captioneval.metrics`` entry-point group.

The arithmetic lives in :mod:`captioneval.kernels`. Django-free.
"""
