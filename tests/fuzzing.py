"""Shared pieces of the fuzz tests (tests/test_fuzz_importers.py, tests/test_fuzz_forms.py)."""
import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

#: Characters that break naive text handling: combining marks; Hebrew, Arabic, a right-to-left
#: override and mark; zero-width joiner, non-joiner and space, a BOM; emoji and the parts of a ZWJ
#: family, astral letters; Unicode line separators; Latin-1 and CJK letters.
SPECIAL_CHARS = (
    "\u0301\u0308\u20dd"
    "\u05d0\u05d1\u0627\u0644\u202e\u200f"
    "\u200d\u200c\u200b\ufeff"
    "\U0001f600\U0001f468\U0001f469\U0001f467\U0001d518\U00020000"
    "\u2028\u2029\x85\x0b\x0c\x1c"
    "\u00e9\u00df\u4e2d\u6587"
)


def unicode_text(min_size: int = 0, max_size: int = 40, nul: bool = False) -> st.SearchStrategy[str]:
    """Any UTF-8-encodable text (no surrogates) mixed with :data:`SPECIAL_CHARS`, NUL only if ``nul``."""
    return st.text(
        alphabet=st.one_of(
            st.characters(codec="utf-8", exclude_characters="" if nul else "\x00"),
            st.sampled_from(SPECIAL_CHARS + ("\x00" if nul else "")),
        ),
        min_size=min_size, max_size=max_size,
    )


def fuzz_settings(n: int):
    """Hypothesis settings of the fuzz tests: ``n`` examples (times ``FUZZ_SCALE``, default 1, for a
    deeper local run), derandomized so that CI runs the same inputs every time (``FUZZ_RANDOM=1``
    draws new ones), no deadline (the machine is slow)."""
    return settings(
        max_examples=n * int(os.environ.get("FUZZ_SCALE", "1")), deadline=None,
        derandomize=os.environ.get("FUZZ_RANDOM") != "1", database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
    )
