"""``captioneval evaluate --annotations ANN.json --results RES.json``: the COCO caption metrics of a
model's results, with pycocoevalcap's numbers.

Reads a COCO caption annotation file (the references) and a COCO results file (``[{"image_id",
"caption"}]``, one caption per image), scores every image that has a result (as pycocoevalcap's
``COCOEvalCap`` with ``params['image_id'] = cocoRes.getImgIds()``), prints the corpus table with each
metric's signature, and writes the per-caption scores (``--out FILE``, or ``--json`` / ``--csv`` to
stdout). CSV columns: ``image_id``, ``caption``, one column per metric key.

The learned metrics (``--metric clip_s ref_clip_s pac_s ref_pac_s bert_score``, the ``learned``
extra) take their weights from ``--model KEY=SPEC`` (a local file or folder, an OpenAI or Hugging
Face name, a file in ``$CAPTIONEVAL_MODELS_DIR``) and the CLIP family its pictures from ``--images
DIR``: the file the annotation file's ``file_name`` names, else one named by the image id
(:func:`captioneval.evaluate.image_sources`). A missing or unreadable picture is an error naming each.

The LLM judges (``--metric clair fleur ref_fleur``) ask the model ``--judge-model`` served at
``--judge-endpoint`` (an OpenAI-compatible API base; ``--judge-key-env VAR`` names the environment
variable holding its key), at most ``--judge-max-requests`` requests and ``--judge-max-tokens`` tokens per judge; FLEUR and RefFLEUR
send the pictures of ``--images DIR``. Without these options the judges use ``CAPTIONEVAL_JUDGE_URL``
and ``CAPTIONEVAL_JUDGE_MODEL``, or are unavailable (docs/metrics.md).
"""
from __future__ import annotations

import sys

from ..coco import COCO
from ..errors import InputError
from ..evaluate import COCO_METRICS, evaluate
from . import _io


def add_parser(sub) -> None:
    """Register the subcommand."""
    p = sub.add_parser("evaluate", help="COCO caption metrics of a results file (pycocoevalcap's numbers)",
                       description=__doc__.split("\n\n")[1])
    p.add_argument("--annotations", required=True, metavar="ANN.json", help="COCO caption annotations (references)")
    p.add_argument("--results", required=True, metavar="RES.json", help="COCO results: [{image_id, caption}]")
    p.add_argument("--metric", nargs="+", action="extend", metavar="KEY",
                   help=f"metric keys or groups (default: {' '.join(COCO_METRICS)}; METEOR is skipped with the "
                        "reason when Java or pycocoevalcap is missing, unless named here)")
    p.add_argument("--tokenizer", choices=("python", "java"), default=None,
                   help="PTB tokenizer implementation (default python: same output as the Java one, no Java needed)")
    p.add_argument("--images", metavar="DIR",
                   help="folder of the pictures, for clip_s, ref_clip_s, pac_s and ref_pac_s (file_name of the "
                        "annotation file's images, else the image id with .jpg, .png...)")
    p.add_argument("--model", action="append", default=[], metavar="KEY=SPEC",
                   help="weights of a learned metric: a file, a folder, an OpenAI or Hugging Face name "
                        "(e.g. clip_s=/models/ViT-B-32.pt, pac_s=clip_ViT-B-32.pth); repeat per metric")
    p.add_argument("--device", default=None, metavar="DEVICE",
                   help="torch device of the learned metrics: cpu, cuda, cuda:1 (default: CUDA when present)")
    p.add_argument("--judge-endpoint", metavar="URL",
                   help="OpenAI-compatible API base of the LLM judges clair, fleur, ref_fleur (e.g. http://127.0.0.1:8000/v1)")
    p.add_argument("--judge-model", metavar="NAME", help="the model the judges ask (as the server names it)")
    p.add_argument("--judge-key-env", metavar="VAR", help="the environment variable holding the judge's API key")
    p.add_argument("--judge-max-requests", type=int, metavar="N", help="request budget of each judge (default: none)")
    p.add_argument("--judge-max-tokens", type=int, metavar="N",
                   help="token budget of each judge, as the server reports its usage (default: none)")
    _io.add_output_options(p)
    p.set_defaults(run=run)


def learned_options(models: list[str], device: str | None, keys) -> dict:
    """``--model KEY=SPEC`` (repeated) and ``--device`` as :func:`captioneval.evaluate`'s ``options``:
    key -> {"model": SPEC, "device": DEVICE}; the device goes to every learned metric in ``keys`` (the
    ``--metric`` keys). Raises :class:`InputError` for a malformed ``--model``."""
    from ..metrics.builtin.learned import LEARNED

    options: dict = {}
    for item in models:
        key, sep, spec = item.partition("=")
        if not sep or not key or not spec:
            raise InputError("--model", f"expected KEY=SPEC (e.g. clip_s=/models/ViT-B-32.pt), got {item!r}")
        if key not in LEARNED:
            raise InputError("--model", f"{key!r} is not a learned metric (one of {', '.join(LEARNED)})")
        options.setdefault(key, {})["model"] = spec
    if device:
        for key in keys or ():
            if key in LEARNED:
                options.setdefault(key, {})["device"] = device
    return options


def judge_options(args, keys) -> dict:
    """``--judge-*`` as :func:`captioneval.evaluate`'s ``options`` for each judge among ``keys``
    (the ``--metric`` keys): {} when no ``--judge-*`` option is given. Raises :class:`InputError` when
    only one of ``--judge-endpoint`` and ``--judge-model`` is given."""
    from ..metrics.builtin.judges import JUDGES

    given = {"endpoint": args.judge_endpoint, "model": args.judge_model, "api_key_env": args.judge_key_env,
             "max_requests": args.judge_max_requests, "max_total_tokens": args.judge_max_tokens}
    given = {k: v for k, v in given.items() if v is not None}
    if not given:
        return {}
    if not (args.judge_endpoint and args.judge_model):
        raise InputError("--judge-endpoint", "give both --judge-endpoint URL and --judge-model NAME")
    return {key: dict(given) for key in (keys or ()) if key in JUDGES}


def image_files(annotations: str) -> dict:
    """image id -> ``file_name`` of the COCO annotation file's ``images`` (those that have one)."""
    coco = COCO(annotations)
    return {img_id: img["file_name"] for img_id, img in coco.imgs.items() if img.get("file_name")}


def load(annotations: str, results: str) -> tuple[list, list[str], list[list[str]], int]:
    """``(image ids, captions, references, images without a result)`` from the two files.
    Raises :class:`InputError` (``FILE: problem``) for anything wrong in them."""
    coco = COCO(annotations)
    if coco.kind != "annotations":
        raise InputError(annotations, "is a results list, not a COCO annotation file {\"images\", \"annotations\"}")
    res = coco.loadRes(results)
    if not res.imgs:
        raise InputError(results, "has no result")
    ids, captions, references = [], [], []
    for img_id, anns in res.imgToAnns.items():
        if len(anns) != 1:
            raise InputError(results, f"image_id {img_id!r} has {len(anns)} results; a results file has one caption "
                             "per image (caption sets: captioneval diversity)")
        refs = coco.imgToAnns.get(img_id, [])
        if not refs:
            raise InputError(annotations, f"image {img_id!r} has no reference caption")
        ids.append(img_id)
        captions.append(anns[0]["caption"])
        references.append([a["caption"] for a in refs])
    return ids, captions, references, len(coco.imgs) - len(ids)


def run(args) -> int:
    """Evaluate, print the table, write the per-caption scores; return 0."""
    _io.check_output(args.out)
    ids, captions, references, without = load(args.annotations, args.results)
    options = {**learned_options(args.model, args.device, args.metric), **judge_options(args, args.metric)}
    files = image_files(args.annotations) if args.images else None
    result = evaluate(captions, references, metrics=args.metric, ids=ids, tokenizer=args.tokenizer,
                      progress=_io.progress_enabled(args), images=args.images, image_files=files, options=options)
    if without:
        print(f"captioneval: {without} image(s) of {args.annotations} have no result; scored the {len(ids)} that "
              "have one", file=sys.stderr)
    for reason in result.skipped.values():
        print(f"captioneval: {reason}", file=sys.stderr)
    _io.emit_items(args, result, "captions", "per-caption scores")
    return 0
