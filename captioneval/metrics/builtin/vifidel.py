"""VIFIDEL (Madhyastha, Wang & Specia 2019, "VIFIDEL: Evaluating the Visual Fidelity of Image
Descriptions", ACL): the word mover's distance (Kusner et al. 2015) between a caption's content words
and its image's object labels in a word-embedding space, :func:`captioneval.kernels.vifidel.vifidel_many`
(checked against the authors' code, https://github.com/ImperialNLP/vifidel). ``vifidel_ref`` weights
the caption's words by their importance in the reference captions (Sec. 3). The similarity
exp(-WMD) is the score; the raw distance is kept with it."""
from __future__ import annotations

import numpy as np

from captioneval.metrics import base
from captioneval.kernels import embeddings
from captioneval.kernels.vifidel import vifidel_many
from captioneval.metrics.builtin._versions import VIFIDEL_VERSION

ORDER = 110


class Vifidel(base.Metric):
    """VIFIDEL similarity exp(-WMD) in (0, 1] of each caption (NaN when no score is possible: no known
    content word, no objects); ``Scores.raw`` is the word mover's distance."""

    version = VIFIDEL_VERSION
    level = "caption"
    range = (0.0, 1.0)
    higher = "more faithful"
    family = "vifidel"
    groups = ("fidelity",)

    def __init__(self, reference_weighted: bool):
        self.reference_weighted = reference_weighted
        needs = {base.TEXTS, base.OBJECTS, base.WORD_VECTORS} | ({base.REFERENCES} if reference_weighted else set())
        if reference_weighted:
            super().__init__(
                key="vifidel_ref", name="VIFIDEL (reference-weighted)", needs=needs,
                description="VIFIDEL with word importance weights from the reference captions (Madhyastha et al. "
                "2019, Sec. 3).",
            )
        else:
            super().__init__(
                key="vifidel", name="VIFIDEL", needs=needs,
                description="VIFIDEL (Madhyastha et al., ACL 2019): word mover's similarity between the caption and "
                "the image's object labels; the raw distance is kept with each score.",
            )

    def parameters(self) -> dict:
        return {"reference_weighted": self.reference_weighted, "similarity": "exp(-wmd)"}

    def score(self, batch: base.Batch) -> base.Scores:
        """VIFIDEL of ``batch.texts`` (raw captions: VIFIDEL does its own word processing) against
        ``batch.objects`` (label -> count), with ``batch.vectors`` (None: the bundled GloVe 6B 50-d) and,
        reference-weighted, ``batch.references``. ValueError when references are needed and missing."""
        references = None
        if self.reference_weighted:
            if batch.references is None:
                raise ValueError("vifidel_ref needs the reference captions of each caption")
            references = [list(r) for r in batch.references]
        kv = embeddings.load_vectors(batch.vectors)
        result = vifidel_many(list(batch.texts), list(batch.objects), references, vectors=kv)
        return base.Scores(np.asarray(result.similarity, dtype=np.float64), raw=np.asarray(result.distance, dtype=np.float64))


METRICS = [Vifidel(False), Vifidel(True)]
