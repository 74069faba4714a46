"""Metric kernels: the functional layer under the metric classes (numpy / scipy; no Django).

Each module computes one family of scores from tokenised captions and returns arrays; the metric
classes of :mod:`captioneval.metrics` adapt them to the platform's one metric interface (key,
version, level, needs, signature), as aac-metrics keeps ``functional/`` apart from ``classes/``.

* :mod:`~captioneval.kernels.bleu`, :mod:`~captioneval.kernels.rouge`,
  :mod:`~captioneval.kernels.cider` -- vectorised BLEU-1..4, ROUGE-L and CIDEr-D, equal to
  pycocoevalcap's; :mod:`~captioneval.kernels.coco` -- pycocoevalcap's own scorers (the reference);
  :mod:`~captioneval.kernels.meteor` -- METEOR 1.5: the implementation switch and the jar through a
  pool of persistent JVMs; :mod:`~captioneval.kernels.meteor_py` -- METEOR 1.5 in pure Python, equal
  to the jar bit for bit (LGPL, follows METEOR's source);
  :mod:`~captioneval.kernels.corpus` -- corpus scores from per-caption sufficient statistics.
* :mod:`~captioneval.kernels.diversity` -- Self-CIDEr, LSA, mBLEU and set-level measures.
* :mod:`~captioneval.kernels.lexical` -- lexical diversity, LDR, the Lexical Gap.
* :mod:`~captioneval.kernels.vifidel`, :mod:`~captioneval.kernels.embeddings` -- VIFIDEL (word
  mover's distance) and the word vectors it reads; :mod:`~captioneval.kernels.atoms` -- visual atoms;
  :mod:`~captioneval.kernels.stopwords` -- the English stop list of VIFIDEL and LSA (scikit-learn's,
  shipped as a data file).

Importing this package imports nothing of Django, Celery or the platform's apps.
"""
