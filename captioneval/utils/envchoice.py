"""An implementation chosen by an environment variable, checked against the allowed values.

Used by the two switches between a pure-Python port and pycocoevalcap's Java: the PTB tokenizer
(``CAPTIONEVAL_TOKENIZER``, :mod:`captioneval.text.tokenizer`) and METEOR 1.5 (``CAPTIONEVAL_METEOR``,
:mod:`captioneval.kernels.meteor`). Django-free.
"""
from __future__ import annotations

import os


def env_choice(variable: str, allowed: tuple[str, ...], default: str, what: str) -> str:
    """The value of environment variable ``variable`` (``default`` when unset), which must be one of
    ``allowed``. Raises ValueError naming the variable, the value and the allowed values (``what``
    says what is chosen, e.g. "METEOR implementation")."""
    value = os.environ.get(variable, default)
    if value not in allowed:
        raise ValueError(f"{variable}={value!r} is not a {what}; allowed values: "
                         f"{', '.join(repr(v) for v in allowed)}")
    return value
