"""Learned metrics: CLIP-S, RefCLIP-S, PAC-S, RefPAC-S (image-text, CLIP family) and BERTScore, one
class per file, over :mod:`captioneval.kernels.learned`. They need the ``learned`` extra (torch,
transformers, ftfy, regex, Pillow) and the model weights (see
:mod:`captioneval.kernels.learned.models`). Use them directly::

    from captioneval.metrics.learned.clip_s import ClipS
    from captioneval.metrics.base import Batch
    ClipS(model="ViT-B/32").score(Batch(texts=["a dog runs"], images=["dog.jpg"])).values

    from captioneval.metrics.learned.bert_score import BertScore
    BertScore().score(Batch(texts=["a dog runs"], reference_texts=[["a dog is running"]])).values

From the library: ``captioneval.evaluate(..., images=DIR, options={"clip_s": {"model": PATH}})`` and
``captioneval evaluate --images DIR --model clip_s=PATH``. The platform's pipeline computes the CLIP
family on a dataset's own pictures and BERTScore on its captions (``metrics/learned.py``); the registry lists the metrics, or the
reason they are unavailable (:mod:`captioneval.metrics.builtin.learned`). Django-free.
"""
