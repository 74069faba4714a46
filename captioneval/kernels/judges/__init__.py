"""LLM judges' kernels: the OpenAI-compatible chat-completions client with its concurrency limit,
retries, reply cache and request budget (``client.py``), CLAIR's prompt and parse rules
(``clair.py``) and FLEUR's prompt, image encoding and digit-probability smoothing (``fleur.py``).
The metric classes are :mod:`captioneval.metrics.judges`. A model's reply is untrusted input: it is
size-limited, parsed by documented rules and kept verbatim. Django-free; httpx is imported only when
a request is sent."""
