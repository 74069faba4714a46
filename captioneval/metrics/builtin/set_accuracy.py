"""Accuracy of a caption set (Wang & Chan 2019, CVPR, Sec. 5): the mean CIDEr-D (Vedantam et al. 2015)
of the set's captions against the image's references, :func:`captioneval.kernels.diversity.accuracy`; for
the reference set itself the leave-one-out human accuracy (each reference against the others,
:func:`captioneval.kernels.diversity.leave_one_out_accuracy`)."""
from __future__ import annotations

import numpy as np

from captioneval.metrics import base
from captioneval.kernels.diversity import accuracy, leave_one_out_accuracy
from captioneval.metrics.builtin._versions import SET_ACCURACY_VERSION

ORDER = 80


class SetAccuracy(base.Metric):
    """Mean CIDEr-D of each caption set; NaN for a set whose image has no references, or a reference set
    of fewer than 2 captions; range [0, 10]."""

    key = "set_accuracy"
    name = "Accuracy (CIDEr-D)"
    version = SET_ACCURACY_VERSION
    level = "set"
    range = (0.0, 10.0)
    needs = frozenset({base.CAPTION_SETS, base.REFERENCES, base.DOCUMENT_FREQUENCY})
    family = "set_accuracy"
    groups = ("diversity",)
    description = ("Mean CIDEr-D of the set's captions against the references (Wang & Chan 2019, Sec. 5); for the "
                   "reference set itself the leave-one-out human accuracy.")

    def parameters(self) -> dict:
        return {"kernel": "cider-d", "n": 4, "sigma": 6.0}

    def score(self, batch: base.Batch) -> base.Scores:
        """Accuracy of ``batch.sets`` (first ``batch.m`` captions) against ``batch.references`` with
        ``batch.document_frequency``; ``batch.is_reference`` marks reference sets. ValueError without
        references."""
        if batch.references is None:
            raise ValueError("set_accuracy needs the references of each set")
        sets, references = self.sets_of(batch), batch.references
        out = np.full(len(sets), np.nan)
        flags = list(batch.is_reference) if batch.is_reference is not None else [False] * len(sets)
        model = [i for i in range(len(sets)) if references[i] and not flags[i]]
        human = [i for i in range(len(sets)) if flags[i] and len(sets[i]) >= 2]
        if model:
            out[model] = accuracy([sets[i] for i in model], [references[i] for i in model], df=batch.document_frequency)
        if human:
            out[human] = leave_one_out_accuracy([sets[i] for i in human], df=batch.document_frequency)
        return base.Scores(out)


METRICS = [SetAccuracy()]
