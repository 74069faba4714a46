"""Deprecated: the metric classes and kernels moved to :mod:`captioneval` in 0.20.

``metrics.scorers.<module>`` still imports, for one release, as the same module object under its new
name (with a :class:`DeprecationWarning`): ``base``, ``registry``, ``plugins`` and ``builtin`` are in
:mod:`captioneval.metrics`; ``tokenizer`` and ``ptb`` in :mod:`captioneval.text`; the kernels
(``bleu``, ``rouge``, ``cider``, ``meteor``, ``corpus``, ``coco``, ``diversity``, ``lexical``,
``vifidel``, ``embeddings``, ``atoms``) in :mod:`captioneval.kernels`. See docs/library.md.
"""
from captioneval.utils.deprecation import alias_modules

LEGACY_MODULES = {
    **{f"{__name__}.{m}": f"captioneval.metrics.{m}" for m in ("base", "registry", "plugins", "builtin")},
    **{f"{__name__}.{m}": f"captioneval.text.{m}" for m in ("tokenizer", "ptb")},
    **{f"{__name__}.{m}": f"captioneval.kernels.{m}" for m in (
        "atoms", "bleu", "cider", "coco", "corpus", "diversity", "embeddings", "lexical", "meteor", "rouge",
        "vifidel")},
}
alias_modules(LEGACY_MODULES)
