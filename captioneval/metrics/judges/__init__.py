"""LLM judges as metrics: CLAIR (``clair.py``, text only), FLEUR and RefFLEUR (``fleur.py``,
``ref_fleur.py``, a multimodal model shown the image), over their shared class ``_judge.py`` and the
kernels of :mod:`captioneval.kernels.judges`. They call a model served behind an OpenAI-compatible
endpoint (vLLM, Ollama, llama.cpp's server, a hosted service)::

    from captioneval.metrics.judges.clair import Clair
    from captioneval.metrics.base import Batch
    Clair(endpoint="http://127.0.0.1:8000/v1", model="Qwen/Qwen2.5-7B-Instruct").score(
        Batch(texts=["a dog runs"], reference_texts=[["a dog is running"]])).values

From the library: ``captioneval.evaluate(..., metrics=["clair"], options={"clair": {"endpoint": URL,
"model": NAME}})``. The registry lists them as unavailable until an endpoint is configured
(:mod:`captioneval.metrics.builtin.judges`). Django-free.
"""
