"""Implementation versions shared by several metric files (a module starting with ``_`` is not a
metric module: discovery skips it). Bump a version whenever the numbers of its code could change;
it is stored with every run, so results of different versions are never mixed."""
import os

#: captioneval.kernels.cider (CIDEr-D). /2: without supplied document frequencies, mostly distinct
#: captions take the numeric path (issue 33), whose sums run in another order (at most about one ulp
#: from /1, equal to pycocoevalcap within 1e-15)
CIDER_D_VERSION = "captioneval-cider-d/2"
#: set accuracy = mean CIDEr-D of a caption set with the dataset's document frequencies (always
#: supplied, so the path of CIDER_D_VERSION /1, unchanged)
SET_ACCURACY_VERSION = "captioneval-cider-d/1"
#: captioneval.kernels.diversity (Self-CIDEr, LSA, mBLEU, vocabulary)
DIVERSITY_VERSION = "captioneval-diversity/1"
#: captioneval.kernels.lexical on lexicalrichness 0.5.1 (TTR, Root TTR, Log TTR, HD-D, MTLD)
LEXICAL_VERSION = "captioneval-lexical/1+lexicalrichness-0.5.1"
#: captioneval.kernels.vifidel
VIFIDEL_VERSION = "captioneval-vifidel/1"
#: captioneval.kernels.bleu (BLEU-1..4 with pycocoevalcap 1.2's numbers, vectorised)
BLEU_VERSION = "captioneval-bleu/1"
#: captioneval.kernels.rouge (ROUGE-L with pycocoevalcap 1.2's numbers, bit-parallel LCS)
ROUGE_L_VERSION = "captioneval-rouge-l/1"

#: environment variable choosing the implementation of BLEU-1..4 and ROUGE-L for the module-level METRICS
COCO_METRICS_ENV = "CAPTIONEVAL_COCO_METRICS"
#: its allowed values: our vectorised code (default), or pycocoevalcap's own classes (captioneval.kernels.coco)
COCO_IMPLEMENTATIONS = ("captioneval", "pycocoevalcap")


def coco_implementation(value: str | None = None) -> str:
    """The implementation of BLEU and ROUGE-L to use: ``value``, else the environment variable
    :data:`COCO_METRICS_ENV` (``CAPTIONEVAL_COCO_METRICS``), else ``"captioneval"``. Surrounding
    whitespace is ignored and an empty value means the default.

    Raises ValueError naming the variable and the allowed values for anything else.
    """
    source = "implementation" if value is not None else COCO_METRICS_ENV
    raw = value if value is not None else os.environ.get(COCO_METRICS_ENV, "")
    name = raw.strip() or COCO_IMPLEMENTATIONS[0]
    if name not in COCO_IMPLEMENTATIONS:
        raise ValueError(f"{source}={raw!r} is not a BLEU / ROUGE-L implementation; allowed values: "
                         f"{', '.join(COCO_IMPLEMENTATIONS)} (default {COCO_IMPLEMENTATIONS[0]})")
    return name
