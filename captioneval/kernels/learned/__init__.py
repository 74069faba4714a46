"""Kernels of the learned metrics (need the ``learned`` extra; nothing here imports torch at import
time except :mod:`~captioneval.kernels.learned.models`' functions when called):

* :mod:`~captioneval.kernels.learned.clip_image` -- the reference image preprocessing, image errors;
* :mod:`~captioneval.kernels.learned.clip_text` -- OpenAI CLIP's tokenizer;
* :mod:`~captioneval.kernels.learned.models` -- finding and loading weights;
* :mod:`~captioneval.kernels.learned.clip_score` -- CLIP-S / RefCLIP-S arithmetic, the feature cache;
* :mod:`~captioneval.kernels.learned.bertscore` -- BERTScore as ``bert_score.score`` computes it.
"""
