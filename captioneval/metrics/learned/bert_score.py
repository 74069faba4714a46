"""BERTScore (Zhang et al. 2020, ICLR; reference: the ``bert-score`` package 0.3.13, ``bert_score.score``):
greedy cosine matching of contextual token embeddings between a caption and each of its references,
the best reference kept. Default as the package for English: roberta-large, layer 17, idf off, no
rescaling; F1 is the score, P and R come with it (``details``). The arithmetic, its sources and the
reference's quirks kept for exactness (batch composition, max over references per P/R/F, empty
sentences, the tokeniser's prefix space under transformers 5) are in
:mod:`captioneval.kernels.learned.bertscore`."""
from __future__ import annotations

import numpy as np

from captioneval.kernels.learned import bertscore as k
from captioneval.kernels.learned.models import load_text_model, resolve_device
from captioneval.metrics import base

VERSION = "captioneval-bertscore/1"


class BertScore(base.Metric):
    """BERTScore F1 (or P / R, ``output``) per caption against its raw reference captions.

    Parameters (all in :meth:`parameters`, hence in the signature and the run's identity):
    ``model`` a Hugging Face name (cache, then hub unless offline), a local model folder, or a folder
    name under ``CAPTIONEVAL_MODELS_DIR`` (see :func:`captioneval.kernels.learned.models.load_text_model`);
    ``num_layers`` the layer whose hidden states are matched (17 for roberta-large; required for any
    other model); ``idf`` weight tokens by idf over the batch's references (as ``bert_score.score(...,
    idf=True)``: the scores then depend on the batch's references, like CIDEr's document frequency);
    ``rescale`` (s - b) / (1 - b) with b the baseline (``baseline``: a bert-score baseline file or a
    (P, R, F) triple; default roberta-large's bundled row); ``batch_size`` pairs per matching chunk and
    sentences per encoder batch (64, the reference's; it changes numbers, see the kernel);
    ``device`` ("auto": CUDA when present); ``dtype`` "float32" (the reference's) or "float16";
    ``output`` "f1", "precision" or "recall" (which one ``values`` holds).

    Range: [-1, 1] raw; rescaled (-1 - b) / (1 - b) up to 1 (b the F/P/R baseline).
    """

    key = "bert_score"
    name = "BERTScore"
    version = VERSION
    level = "caption"
    needs = frozenset({base.TEXTS, base.REFERENCE_TEXTS})
    family = "bert_score"
    groups = ("learned",)
    accelerator = True
    description = ("BERTScore F1 (Zhang et al. 2020) against the references, roberta-large layer 17, idf off, "
                   "as bert_score.score of the bert-score package 0.3.13.")

    OUTPUTS = {"precision": 0, "recall": 1, "f1": 2}

    def __init__(self, model: str = k.DEFAULT_MODEL, num_layers: int | None = None, idf: bool = False,
                 rescale: bool = False, baseline=None, batch_size: int = k.DEFAULT_BATCH, device: str = "auto",
                 dtype: str = "float32", output: str = "f1", **attributes):
        super().__init__(**attributes)
        self.model = str(model)
        if num_layers is None:
            if self.model.rstrip("/").split("/")[-1] != k.DEFAULT_MODEL:
                raise ValueError(f"num_layers is required for {self.model!r} (bert-score's model2layers table is "
                                 f"not bundled; roberta-large's is {k.DEFAULT_LAYER})")
            num_layers = k.DEFAULT_LAYER
        if output not in self.OUTPUTS:
            raise ValueError(f"output must be one of {sorted(self.OUTPUTS)}, got {output!r}")
        if dtype not in ("float32", "float16"):
            raise ValueError(f"dtype must be float32 or float16, got {dtype!r}")
        self.num_layers, self.idf, self.rescale = int(num_layers), bool(idf), bool(rescale)
        self.batch_size, self.device_option, self.dtype, self.output = int(batch_size), device, dtype, output
        self.baseline = k.baseline_for(self.model, self.num_layers, baseline) if self.rescale else None
        low = -1.0 if self.baseline is None else (-1 - self.baseline[self.OUTPUTS[output]]) / (1 - self.baseline[self.OUTPUTS[output]])
        self.range = (low, 1.0)
        self._loaded = None

    def device(self) -> str:
        """The torch device the metric runs on."""
        return resolve_device(self.device_option)

    def loaded(self):
        """(tokenizer, truncated model, weights sha256), loaded on first use (WeightsMissing if absent)."""
        if self._loaded is None:
            self._loaded = load_text_model(self.model, self.num_layers, device=self.device(), dtype=self.dtype)
        return self._loaded

    def parameters(self) -> dict:
        """Model, weights sha256 (loads the model), layer, idf, rescaling baseline, batch size, device,
        dtype, output, the tokenizer's behaviour and the transformers version (see the kernel)."""
        import transformers

        tokenizer, _, digest = self.loaded()
        return {"model": self.model, "weights_sha256": digest, "num_layers": self.num_layers, "idf": self.idf,
                "rescale": list(self.baseline) if self.baseline is not None else False,
                "batch_size": self.batch_size, "device": self.device(), "dtype": self.dtype, "output": self.output,
                "tokenizer": f"{type(tokenizer).__name__}/max{tokenizer.model_max_length}"
                             f"/prefix-space:{k.prefix_space_honoured(tokenizer)}",
                "transformers": transformers.__version__, "reference": k.REFERENCE}

    def score(self, batch: base.Batch) -> base.Scores:
        """Score ``batch.texts`` (raw captions, n) against ``batch.reference_texts`` (n non-empty lists
        of raw references). ``values`` float64 (n,) the chosen output; ``raw`` the unrescaled value
        when rescaling, else None; ``details`` per caption {"precision", "recall", "f1"} (after
        rescaling when on). Raises ValueError for missing inputs, WeightsMissing for absent weights."""
        if batch.texts is None or batch.reference_texts is None or len(batch.texts) != len(batch.reference_texts):
            raise ValueError(f"{self.key} needs the raw captions and their references (Batch.texts, Batch.reference_texts)")
        tokenizer, model, _ = self.loaded()
        refs = [list(r) for r in batch.reference_texts]
        prf = k.bert_score(tokenizer, model, list(batch.texts), refs, idf=self.idf, batch_size=self.batch_size,
                           device=self.device())
        col = self.OUTPUTS[self.output]
        raw = None
        if self.baseline is not None:
            raw = np.asarray(prf[col], dtype=np.float64)
            prf = k.rescale(prf, self.baseline)
        values = np.asarray(prf[col], dtype=np.float64)
        details = [{"precision": float(p), "recall": float(r), "f1": float(f)} for p, r, f in zip(*prf)]
        return base.Scores(values, raw=raw, details=details)
