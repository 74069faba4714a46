"""COCO-format caption files without pycocotools, and a drop-in for pycocoevalcap's ``COCOEvalCap``.

:class:`COCO` reads a COCO caption annotation file (``{"images": [{"id", ...}], "annotations":
[{"id", "image_id", "caption"}]}``) or a results file (``[{"image_id", "caption"}]``) and offers
what pycocoevalcap's ``eval.py`` reads from pycocotools' ``COCO`` objects: ``getImgIds()`` and
``imgToAnns`` (image id -> list of annotation dicts), plus ``loadRes`` (pycocotools' name) to
attach a results file to an annotation file, ``imgs``, ``anns`` and ``dataset``.

:class:`COCOEvalCap` takes the same ``(coco, cocoRes)`` arguments as pycocoevalcap 1.2's
(https://github.com/tylin/coco-caption ``pycocoevalcap/eval.py``), pycocotools' ``COCO`` objects or
ours, or simply the two files' paths or already-parsed JSON, and fills the same attributes after
:meth:`COCOEvalCap.evaluate`: ``eval`` (``{"Bleu_1": ..., "Bleu_2", "Bleu_3", "Bleu_4", "METEOR",
"ROUGE_L", "CIDEr"}``, corpus scores), ``imgToEval`` (image id -> ``{"image_id", <same keys>}``)
and ``evalImgs`` (the list of ``imgToEval``'s values), evaluating the images of
``params["image_id"]`` (default: every image of the annotations, as pycocoevalcap).

The numbers are pycocoevalcap's (checked in ``tests/test_library.py`` against its ``COCOEvalCap``
on Flickr8k-Expert): captions PTB-tokenised as its Stanford tokeniser does (our pure-Python
tokenizer, :mod:`captioneval.text.ptb`, equal to it on every bundled caption), the results and the
references each as one batch; corpus BLEU-n from summed statistics (``BleuScorer.compute_score``,
:class:`captioneval.kernels.corpus.BleuCorpus`), corpus METEOR the jar's aggregate
(:class:`captioneval.kernels.corpus.MeteorCorpus`), ROUGE-L and CIDEr the means of the per-image
scores, CIDEr(-D) with the document frequencies of the evaluated images. Only METEOR needs
pycocoevalcap (its data, ``pip install 'captioneval[meteor]'``; Java too with
``CAPTIONEVAL_METEOR=java``); without them METEOR is reported in
:attr:`COCOEvalCap.unavailable` with the reason, as SPICE always is (its jar downloads Stanford
CoreNLP at start-up, which no package registry provides).
"""
from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping

from .errors import InputError

#: pycocoevalcap's names of the metric keys, in its order
PYCOCOEVALCAP_NAMES = {"bleu_1": "Bleu_1", "bleu_2": "Bleu_2", "bleu_3": "Bleu_3", "bleu_4": "Bleu_4",
                       "meteor": "METEOR", "rouge_l": "ROUGE_L", "cider_d": "CIDEr"}
#: why SPICE is not computed
SPICE_REASON = ("SPICE is unavailable: its jar downloads Stanford CoreNLP 3.6.0 at start-up, which no package "
                "registry provides and captioneval never fetches at run time")


def read_text(path: str | os.PathLike) -> str:
    """The text of the UTF-8 file ``path`` (a leading byte-order mark dropped). Raises
    :class:`InputError` (``path: problem``) for a missing, unreadable or non-UTF-8 file, or a folder."""
    source = str(path)
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise InputError(source, "no such file") from None
    except IsADirectoryError:
        raise InputError(source, "is a directory, not a file") from None
    except OSError as exc:
        raise InputError(source, f"cannot be read ({exc.strerror or exc})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(source, f"is not UTF-8 text (byte {exc.start})") from None
    return text


def read_json(path: str | os.PathLike) -> Any:
    """Parse the JSON file ``path``. Raises :class:`InputError` (``path: problem``) for a missing or
    unreadable file, bytes that are not UTF-8 (:func:`read_text`) and text that is not JSON (with
    line and column)."""
    source = str(path)
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(source, f"is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise InputError(source, "is not valid JSON: nested too deeply") from None


def _image_id(value, source: str, where: str):
    if isinstance(value, bool) or not isinstance(value, (int, str)) or (isinstance(value, str) and not value.strip()):
        raise InputError(source, f"{where}: image_id must be an integer or a non-empty string, got {value!r}"[:300])
    return value


def _caption(value, source: str, where: str) -> str:
    if not isinstance(value, str):
        raise InputError(source, f"{where}: caption must be a string, got {type(value).__name__}")
    return value


class COCO:
    """A COCO caption annotation or results file, read without pycocotools.

    Parameters
    ----------
    source : path (str or PathLike), a parsed annotation dict ``{"images", "annotations"}`` or a
        parsed results list ``[{"image_id", "caption"}]``, or None for an empty object.
    name : how errors name the source (default: the path, or ``"annotations"`` / ``"results"``).

    Attributes (pycocotools' names)
    -------------------------------
    dataset : the parsed JSON (a results list is stored as ``{"annotations": [...]}``).
    imgs : image id -> image dict (``{"id": ...}``; for a results file, the ids of its entries).
    anns : annotation id -> annotation dict (results get ids 1..n in file order, as ``loadRes``).
    imgToAnns : image id -> list of its annotation dicts, in file order (a ``defaultdict(list)``,
        as pycocotools').

    Raises :class:`InputError` for a file that cannot be read or parsed, a missing ``annotations``
    list, entries without ``image_id`` or ``caption``, ids of the wrong type, annotations of images
    the ``images`` list does not have, or duplicate image ids.
    """

    def __init__(self, source=None, name: str | None = None):
        self.dataset: dict = {}
        self.imgs: dict = {}
        self.anns: dict = {}
        self.imgToAnns: defaultdict = defaultdict(list)
        #: "annotations" or "results": which of the two formats was read
        self.kind = "annotations"
        if source is None:
            return
        if isinstance(source, (str, os.PathLike)):
            name = name or str(source)
            data = read_json(source)
        else:
            data = source
        if isinstance(data, list):
            self._index_results(data, name or "results")
        elif isinstance(data, Mapping):
            self._index_annotations(data, name or "annotations")
        else:
            raise InputError(name or "annotations", "must be a COCO annotation object {\"images\", \"annotations\"} "
                             f"or a results list, got {type(data).__name__}")

    def _index_annotations(self, data: Mapping, source: str) -> None:
        anns = data.get("annotations")
        if not isinstance(anns, list):
            raise InputError(source, "has no \"annotations\" list (a COCO caption annotation file has "
                             "\"images\" and \"annotations\")")
        images = data.get("images")
        if images is not None and not isinstance(images, list):
            raise InputError(source, "\"images\" must be a list")
        self.dataset = dict(data)
        for i, img in enumerate(images or []):
            if not isinstance(img, Mapping) or "id" not in img:
                raise InputError(source, f"images[{i}] has no \"id\"")
            key = _image_id(img["id"], source, f"images[{i}]")
            if key in self.imgs:
                raise InputError(source, f"images[{i}]: image id {key!r} is listed twice")
            self.imgs[key] = dict(img)
        for i, ann in enumerate(anns):
            where = f"annotations[{i}]"
            if not isinstance(ann, Mapping):
                raise InputError(source, f"{where} must be an object, got {type(ann).__name__}")
            for field in ("image_id", "caption"):
                if field not in ann:
                    raise InputError(source, f"{where} has no \"{field}\"")
            key = _image_id(ann["image_id"], source, where)
            _caption(ann["caption"], source, where)
            if images is not None and key not in self.imgs:
                raise InputError(source, f"{where}: image_id {key!r} is not in the \"images\" list")
            if images is None:
                self.imgs.setdefault(key, {"id": key})
            ann = dict(ann)
            ann.setdefault("id", i + 1)
            self.anns[ann["id"]] = ann
            self.imgToAnns[key].append(ann)

    def _index_results(self, data: list, source: str) -> None:
        self.dataset = {"annotations": data}
        self.kind = "results"
        for i, entry in enumerate(data):
            where = f"entry {i}"
            if not isinstance(entry, Mapping):
                raise InputError(source, f"{where} must be an object {{\"image_id\", \"caption\"}}, got "
                                 f"{type(entry).__name__}")
            for field in ("image_id", "caption"):
                if field not in entry:
                    raise InputError(source, f"{where} has no \"{field}\"")
            key = _image_id(entry["image_id"], source, where)
            _caption(entry["caption"], source, where)
            ann = dict(entry)
            ann["id"] = i + 1
            self.imgs.setdefault(key, {"id": key})
            self.anns[ann["id"]] = ann
            self.imgToAnns[key].append(ann)

    def getImgIds(self) -> list:
        """The image ids, in file order (pycocotools' name)."""
        return list(self.imgs)

    def loadRes(self, results, name: str | None = None) -> "COCO":
        """A results file (path, or parsed list) as a :class:`COCO` whose ids are checked against
        this annotation file's images, as pycocotools' ``loadRes`` (which asserts it). Raises
        :class:`InputError` naming the first ids the annotations do not have."""
        source = name or (str(results) if isinstance(results, (str, os.PathLike)) else "results")
        res = results if isinstance(results, COCO) else COCO(results, name=source)
        if res.kind != "results":
            raise InputError(source, "is not a COCO results file: a JSON list of {\"image_id\", \"caption\"} "
                             "was expected, not an object")
        unknown = [k for k in res.imgs if k not in self.imgs]
        if unknown:
            raise InputError(source, f"{len(unknown)} result(s) for image ids the annotations do not have, e.g. "
                             + ", ".join(repr(k) for k in unknown[:5]))
        return res


def as_coco(value, role: str) -> Any:
    """``value`` if it already offers ``getImgIds`` and ``imgToAnns`` (pycocotools' COCO, ours),
    else :class:`COCO` of it (a path, a parsed dict or list). ``role`` names it in errors."""
    if hasattr(value, "getImgIds") and hasattr(value, "imgToAnns"):
        return value
    if isinstance(value, (str, os.PathLike, Mapping, list)):
        return COCO(value, name=str(value) if isinstance(value, (str, os.PathLike)) else role)
    raise TypeError(f"{role} must be a COCO object (pycocotools or captioneval.coco.COCO), a path to a COCO "
                    f"JSON file or its parsed JSON; got {type(value).__name__}")


class COCOEvalCap:
    """Drop-in replacement for pycocoevalcap 1.2's ``COCOEvalCap`` (see the module docstring).

    Parameters
    ----------
    coco : the references: a pycocotools ``COCO``, a :class:`COCO`, a COCO annotation file's path or
        its parsed dict.
    cocoRes : the results: the same kinds (a results file's path or parsed list); ``coco.loadRes``
        is not needed (ids are checked against ``coco`` when :meth:`evaluate` runs).
    metrics : metric keys to compute (default the COCO metrics ``bleu_1``..``bleu_4``, ``meteor``,
        ``rouge_l``, ``cider_d``; not a pycocoevalcap parameter).
    verbose : print pycocoevalcap's progress lines and ``"Bleu_1: 0.xxx"`` results to stdout, as it
        does (default True).

    Attributes after :meth:`evaluate`: ``eval``, ``imgToEval``, ``evalImgs`` (pycocoevalcap's),
    ``unavailable`` (pycocoevalcap name -> why it was not computed: ``SPICE`` always, ``METEOR``
    without Java or pycocoevalcap's jar) and ``evaluation`` (the :class:`captioneval.Evaluation`
    with every metric's signature).
    """

    def __init__(self, coco, cocoRes, metrics=None, verbose: bool = True):
        self.evalImgs: list = []
        self.eval: dict = {}
        self.imgToEval: dict = {}
        self.coco = as_coco(coco, "coco")
        self.cocoRes = as_coco(cocoRes, "cocoRes")
        if isinstance(self.coco, COCO) and isinstance(self.cocoRes, COCO):
            self.cocoRes = self.coco.loadRes(self.cocoRes, name=str(cocoRes) if isinstance(cocoRes, (str, os.PathLike))
                                             else "cocoRes")
        self.params = {"image_id": self.coco.getImgIds()}
        self.metrics = metrics
        self.verbose = verbose
        self.unavailable: dict[str, str] = {}
        self.evaluation = None

    def _say(self, text: str) -> None:
        if self.verbose:
            print(text)

    def evaluate(self) -> None:
        """Score the results of every image in ``params["image_id"]`` and fill ``eval``,
        ``imgToEval`` and ``evalImgs``.

        Raises :class:`InputError` when an image has no reference caption or not exactly one result
        (pycocoevalcap fails with an assertion then), :class:`~captioneval.errors.MetricError` for a
        metric named in ``metrics`` that cannot run here."""
        from .evaluate import COCO_METRICS, evaluate

        img_ids = list(self.params["image_id"])
        references, candidates = [], []
        for img_id in img_ids:
            refs = [a["caption"] for a in self.coco.imgToAnns.get(img_id, [])] \
                if hasattr(self.coco.imgToAnns, "get") else [a["caption"] for a in self.coco.imgToAnns[img_id]]
            res = [a["caption"] for a in self.cocoRes.imgToAnns.get(img_id, [])] \
                if hasattr(self.cocoRes.imgToAnns, "get") else [a["caption"] for a in self.cocoRes.imgToAnns[img_id]]
            if not refs:
                raise InputError("annotations", f"image {img_id!r} has no reference caption")
            if len(res) != 1:
                raise InputError("results", f"image {img_id!r} has {len(res)} results; COCOEvalCap scores exactly one "
                                 "caption per image (set params['image_id'] to the images with results)")
            references.append(refs)
            candidates.append(res[0])
        self._say("tokenization...")
        requested = list(self.metrics) if self.metrics is not None else list(COCO_METRICS)
        self._say("setting up scorers...")
        result = evaluate(candidates, references, metrics=requested, ids=img_ids,
                          skip_unavailable=self.metrics is None)
        self.evaluation = result
        for key, reason in result.skipped.items():
            self.unavailable[PYCOCOEVALCAP_NAMES.get(key, key)] = reason
            print(f"captioneval: {reason}", file=sys.stderr)
        self.unavailable["SPICE"] = SPICE_REASON
        for key in result.metrics:
            method = PYCOCOEVALCAP_NAMES.get(key, key)
            self.eval[method] = result.corpus[key]
            column = result.scores[key]
            for img_id, value in zip(img_ids, column):
                self.imgToEval.setdefault(img_id, {"image_id": img_id})[method] = float(value)
            self._say("%s: %0.3f" % (method, result.corpus[key]))
        self._say(SPICE_REASON)
        self.evalImgs = [e for _, e in self.imgToEval.items()]
