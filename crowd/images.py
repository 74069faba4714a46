"""Where a dataset's pictures come from: its *image source*.

A :class:`~crowd.models.Dataset` names one source kind in ``image_source`` and its setting in
``image_location``:

- ``"url"``: a URL template (``https://host/path/{key}``) checked by
  :func:`crowd.kinds.base.check_url_template`; ``{key}`` is filled with the image key
  percent-encoded by :func:`crowd.kinds.base.quote_key`. The rater's browser loads the picture
  from that host; the platform never fetches it.
- ``"coco"``: the public COCO image server for one split (``image_location`` = ``val2014``,
  ``train2017``...), for datasets whose keys are COCO image ids (``"974"``) or file names:
  ``http://images.cocodataset.org/val2014/COCO_val2014_000000000974.jpg`` (2014/2015 file names
  carry the split, 2017 ones are the bare 12-digit id). THumB gets it by default.
- ``"folder"``: a local folder (absolute path) the platform serves at
  ``/datasets/<name>/image-files/<key>`` (:mod:`crowd.views.images`).
- ``"upload"``: files uploaded by staff (:func:`store_uploads`), kept in ``IMAGES_ROOT/<dataset name>/``
  and served like a folder.
- ``""``: no source; :func:`image_url` returns None (the image's own http(s) ``url`` field is used
  when an importer stored one).

Each kind is one small class implementing :class:`ImageSource`; :func:`source_for` picks it.
"""
from __future__ import annotations

import os
import re
import tempfile
from abc import ABC, abstractmethod
from pathlib import Path

from django.conf import settings
from django.urls import reverse

from .kinds.base import _HTTP_PREFIX, CampaignSpecError, check_url_template, quote_key

URL, COCO, FOLDER, UPLOAD = "url", "coco", "folder", "upload"
SOURCE_KINDS = (URL, COCO, FOLDER, UPLOAD)

#: file name extensions served from folders and accepted in uploads, with their content type
IMAGE_TYPES = {
    ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".png": "image/png", ".gif": "image/gif",
    ".webp": "image/webp", ".bmp": "image/bmp",
}

class ImageSourceError(ValueError):
    """An image source setting or an image key is invalid; the message says what is wrong."""


def sniff_image_type(head: bytes) -> str | None:
    """The content type of an image by its first bytes (magic numbers: JPEG ``FF D8 FF``, PNG
    ``89 'PNG' 0D 0A 1A 0A``, GIF ``'GIF87a'``/``'GIF89a'``, WebP ``'RIFF' .... 'WEBP'``, BMP
    ``'BM'``), or None when they are none of these. Pass at least the first 12 bytes."""
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head[:2] == b"BM":
        return "image/bmp"
    return None


def check_key(key: str) -> str:
    """Return ``key`` if it can name a file inside an image folder: not empty, at most 255
    characters, no NUL or backslash, not absolute, no empty, ``.`` or ``..`` segment. Raises
    ImageSourceError otherwise."""
    if not key or len(key) > 255 or "\x00" in key or "\\" in key or key.startswith("/") \
            or any(seg in ("", ".", "..") for seg in key.split("/")):
        raise ImageSourceError(f"the image key {key[:100]!r} cannot name a file in the image folder")
    return key


class ImageSource(ABC):
    """One kind of image source. ``kind`` is its name in ``Dataset.image_source``."""

    kind: str = ""

    @abstractmethod
    def url(self, dataset, key: str) -> str:
        """The URL a browser loads the picture of image ``key`` from (absolute http(s) or a path on
        this site). Raises ImageSourceError or CampaignSpecError for a key that cannot be used."""

    def file(self, key: str) -> Path | None:
        """The local file of image ``key`` to serve, or None when this source is not local or the
        file is missing. Refuses (None) keys that climb out of the folder, including by symlink."""
        return None

    @abstractmethod
    def describe(self) -> str:
        """One line saying where pictures come from (for pages and commands)."""


class UrlTemplateSource(ImageSource):
    """Pictures on a web server: ``template`` with ``{key}`` (checked by check_url_template)."""

    kind = URL

    def __init__(self, template: str):
        try:
            self.template = check_url_template(template)
        except CampaignSpecError as exc:
            raise ImageSourceError(str(exc)) from None

    def url(self, dataset, key: str) -> str:
        return self.template.format(key=quote_key(key))

    def describe(self) -> str:
        return f"URL template {self.template}"


#: the splits of the public COCO image server (https://cocodataset.org/#download)
COCO_SPLITS = ("train2014", "val2014", "test2014", "test2015", "train2017", "val2017", "test2017", "unlabeled2017")
#: COCO 2014/2015 file names carry their split: COCO_val2014_000000000974.jpg
_COCO_FILE = re.compile(r"COCO_(?P<split>(?:train|val|test)201[45])_(?P<id>[0-9]{12})\.jpg")


class CocoSource(ImageSource):
    """Pictures on the public COCO server (``http://images.cocodataset.org/<split>/<file name>``);
    keys are COCO image ids (decimal, at most 12 digits) or the split's own file names."""

    kind = COCO
    BASE = "http://images.cocodataset.org"

    def __init__(self, split: str):
        if split not in COCO_SPLITS:
            raise ImageSourceError(f"unknown COCO split {split[:40]!r}; use one of {', '.join(COCO_SPLITS)}")
        self.split = split

    def file_name(self, key: str) -> str:
        """The COCO file name of image ``key`` in this split; ImageSourceError for another key."""
        match = _COCO_FILE.fullmatch(key)
        if match is not None and match.group("split") == self.split:
            return key
        if re.fullmatch(r"[0-9]{1,12}", key):
            number = f"{int(key):012d}"
            return f"{number}.jpg" if self.split.endswith("2017") else f"COCO_{self.split}_{number}.jpg"
        if re.fullmatch(r"[0-9]{12}\.jpg", key) and self.split.endswith("2017"):
            return key
        raise ImageSourceError(f"the image key {key[:100]!r} is not a COCO image id of {self.split}")

    def url(self, dataset, key: str) -> str:
        return f"{self.BASE}/{self.split}/{self.file_name(key)}"

    def describe(self) -> str:
        return f"public COCO server, {self.split} ({self.BASE}/{self.split}/...)"


class FolderSource(ImageSource):
    """Pictures in a local folder served by the platform; keys are paths relative to it."""

    kind = FOLDER

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)

    def url(self, dataset, key: str) -> str:
        check_key(key)
        return reverse("crowd:image-file", kwargs={"name": dataset.name, "key": key})

    def file(self, key: str) -> Path | None:
        try:
            check_key(key)
        except ImageSourceError:
            return None
        if Path(key).suffix.lower() not in IMAGE_TYPES:
            return None
        try:
            root = self.directory.resolve(strict=True)
            path = (root / key).resolve(strict=True)
        except (OSError, RuntimeError):
            return None
        if not path.is_relative_to(root) or not path.is_file():
            return None
        return path

    def describe(self) -> str:
        return f"local folder {self.directory}"


class UploadSource(FolderSource):
    """Pictures uploaded through the platform, kept in ``IMAGES_ROOT/<dataset name>/``."""

    kind = UPLOAD

    def __init__(self, dataset_name: str):
        super().__init__(upload_dir(dataset_name))

    def describe(self) -> str:
        return f"uploaded files in {self.directory}"


def upload_dir(dataset_name: str) -> Path:
    """The folder of a dataset's uploaded pictures: ``settings.IMAGES_ROOT / <dataset name>``."""
    return Path(settings.IMAGES_ROOT) / dataset_name


def source_for(dataset) -> ImageSource | None:
    """The :class:`ImageSource` of ``dataset``, or None when it has none. Raises ImageSourceError
    for a stored setting that is no longer valid (e.g. a template edited in the admin)."""
    kind = getattr(dataset, "image_source", "") or ""
    location = getattr(dataset, "image_location", "") or ""
    if kind == URL:
        return UrlTemplateSource(location)
    if kind == COCO:
        return CocoSource(location)
    if kind == FOLDER:
        return FolderSource(location)
    if kind == UPLOAD:
        return UploadSource(dataset.name)
    return None


def image_url(image) -> str | None:
    """The public URL of ``image``'s picture (an :class:`~crowd.models.Image`) from its dataset's
    image source: an absolute http(s) URL, or a path on this site for local folders and uploads.
    Falls back to the image's own ``url`` when it is http(s). None when there is no source or the
    key cannot be used with it."""
    try:
        source = source_for(image.dataset)
        if source is not None:
            return source.url(image.dataset, image.key)
    except (ImageSourceError, CampaignSpecError):
        return None
    return image.url if _HTTP_PREFIX.match(image.url or "") else None


# --- setting a source -------------------------------------------------------------------------------
def set_source(dataset, *, image_url: str | None = None, images_dir: str | os.PathLike | None = None,
               upload: bool = False, none: bool = False, coco: str | None = None) -> ImageSource | None:
    """Give ``dataset`` exactly one image source (or none with ``none=True``) and save it.

    ``image_url``: a template checked by check_url_template; ``images_dir``: an existing folder
    (stored as its absolute, resolved path); ``upload``: the dataset's upload folder
    (:func:`upload_dir`); ``coco``: a split of the public COCO server (:class:`CocoSource`). Raises ImageSourceError (nothing saved) for zero or several choices, a
    bad template, or a folder that does not exist. Returns the new source (None for none)."""
    chosen = [c for c in (image_url, images_dir, upload or None, none or None, coco) if c]
    if len(chosen) != 1:
        raise ImageSourceError("give exactly one of --image-url TEMPLATE, --images-dir DIR, --coco SPLIT, --uploads or --none")
    if coco:
        source = CocoSource(coco)
        kind, location = COCO, source.split
    elif image_url:
        source = UrlTemplateSource(str(image_url))
        kind, location = URL, source.template
    elif images_dir:
        folder = Path(images_dir).expanduser()
        if not folder.is_dir():
            raise ImageSourceError(f"--images-dir {str(images_dir)[:200]!r} is not an existing folder")
        folder = folder.resolve()
        source, kind, location = FolderSource(folder), FOLDER, str(folder)
        if len(location) > 2000:
            raise ImageSourceError("the image folder's path is longer than 2,000 characters")
    elif upload:
        source, kind, location = UploadSource(dataset.name), UPLOAD, ""
    else:
        source, kind, location = None, "", ""
    dataset.image_source, dataset.image_location = kind, location
    dataset.save(update_fields=["image_source", "image_location"])
    return source


#: COCO split of the datasets of importers whose keys are COCO image ids: THumB 1.0 rates the
#: Karpathy test split, whose images are COCO val2014 (its file names the ``image`` field
#: ``COCO_val2014_<12-digit id>.jpg``, checked by tests/test_image_sources.py)
COCO_SPLIT_OF_KIND = {"thumb": "val2014"}


def coco_split(keys, hint: str = "") -> str | None:
    """The COCO split of image ``keys``: the one split named by their file names when every key is a
    COCO 2014/2015 file name, else ``hint`` (a split, or a name such as ``captions_val2017.json``
    that contains one) when every key is a COCO id; None otherwise."""
    splits = set()
    for key in keys:
        match = _COCO_FILE.fullmatch(key)
        if match is not None:
            splits.add(match.group("split"))
        elif re.fullmatch(r"[0-9]{1,12}", key):
            splits.add(None)
        else:
            return None
    if len(splits) == 1 and None not in splits:
        return splits.pop()
    if splits == {None}:
        found = [s for s in COCO_SPLITS if s in hint]
        return found[0] if len(found) == 1 else None
    return None


def default_source(dataset, hint: str = "") -> ImageSource | None:
    """Give ``dataset`` the public COCO server as image source when it has none and its keys are
    COCO file names of one split, or COCO ids whose split is known (``hint``, e.g. the annotation
    file's name, or :data:`COCO_SPLIT_OF_KIND` for the importer); returns the source set, else None."""
    if getattr(dataset, "image_source", ""):
        return None
    hint = hint or COCO_SPLIT_OF_KIND.get(dataset.kind, "")
    split = coco_split(dataset.images.values_list("key", flat=True).iterator(), hint)
    return set_source(dataset, coco=split) if split else None


def missing_files(dataset, keys, limit: int = 3) -> tuple[int, list[str]]:
    """For a local source (folder or uploads): how many of image ``keys`` have no servable file, and
    the first ``limit`` of them. ``(0, [])`` for a URL source (the server does not fetch URLs)."""
    source = source_for(dataset)
    if source is None or source.kind not in (FOLDER, UPLOAD):
        return 0, []
    missing = [k for k in keys if source.file(k) is None]
    return len(missing), missing[:limit]


# --- uploads ------------------------------------------------------------------------------------
#: the largest picture accepted by the upload form
MAX_UPLOAD_BYTES = 20 * 2**20


def upload_key(dataset, filename: str, keys: set[str]) -> str | None:
    """The image key an uploaded file named ``filename`` is the picture of: the key equal to the
    file name, else the only key whose last path segment is that name; None when none or several."""
    name = Path(filename.replace("\\", "/")).name
    if name in keys:
        return name
    matches = [k for k in keys if k.rsplit("/", 1)[-1] == name]
    return matches[0] if len(matches) == 1 else None


def store_uploads(dataset, files) -> dict:
    """Store uploaded pictures of ``dataset`` (Django UploadedFile objects) in its upload folder.

    A file is accepted when its name matches an image key (:func:`upload_key`), has an image
    extension (:data:`IMAGE_TYPES`), at most :data:`MAX_UPLOAD_BYTES` and first bytes of that image
    type (:func:`sniff_image_type`); each accepted file is written to a temporary file in the
    folder and renamed into place, so a picture is there whole or not at all. Refused files are
    listed with the reason. When at least one file is stored the dataset's image source becomes
    its uploads. Returns ``{"stored": [key, ...], "refused": [(file name, reason), ...]}``."""
    keys = set(dataset.images.values_list("key", flat=True))
    folder = upload_dir(dataset.name)
    stored, refused = [], []
    for upload in files:
        filename = str(upload.name or "")[:255]
        key = upload_key(dataset, filename, keys)
        suffix = Path(filename).suffix.lower()
        if suffix not in IMAGE_TYPES:
            refused.append((filename, f"not an image file name (use {', '.join(IMAGE_TYPES)})"))
            continue
        if key is None:
            refused.append((filename, "no image of this dataset has this key"))
            continue
        try:
            check_key(key)
        except ImageSourceError as exc:
            refused.append((filename, str(exc)))
            continue
        if upload.size > MAX_UPLOAD_BYTES:
            refused.append((filename, f"larger than {MAX_UPLOAD_BYTES // 2**20} MB"))
            continue
        head = upload.read(16)
        if sniff_image_type(head) != IMAGE_TYPES[suffix]:
            refused.append((filename, f"its content is not a {IMAGE_TYPES[suffix]} picture"))
            continue
        upload.seek(0)
        target = folder / key
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".upload-", suffix=suffix)
        try:
            with os.fdopen(fd, "wb") as out:
                for chunk in upload.chunks():
                    out.write(chunk)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        stored.append(key)
    if stored and dataset.image_source != UPLOAD:
        set_source(dataset, upload=True)
    return {"stored": stored, "refused": refused}


# --- publishing ---------------------------------------------------------------------------------
def shows_images(kind_name: str) -> bool:
    """Whether campaigns of task kind ``kind_name`` show raters the picture
    (``TaskKind.shows_images``); False for an unknown kind."""
    from crowd.kinds import KINDS

    kind = KINDS.get(kind_name)
    return bool(getattr(kind, "shows_images", False))


def how_to(dataset_name: str) -> str:
    """One sentence saying how to give dataset ``dataset_name`` an image source."""
    return (f"give one with `python manage.py set_image_source {dataset_name} --image-url TEMPLATE` "
            "(http(s), {key} = image key) or `--images-dir DIR`, upload pictures on "
            f"/datasets/{dataset_name}/image-upload/, or give the campaign --image-url/--images-dir "
            "(form: image URL)")


def fill_urls(dataset, payloads) -> int:
    """Set ``image_url`` in each payload (a dict with ``image``, the Image id, and ``image_key``)
    that has none, from ``dataset``'s image source (:func:`image_url`); payloads of images the
    source cannot give a URL for are left as they are. Returns how many were filled. One query."""
    lacking = [p for p in payloads if p.get("image_key") and not p.get("image_url") and p.get("image")]
    if not lacking:
        return 0
    try:
        if source_for(dataset) is None:
            return 0
    except ImageSourceError:
        return 0
    by_id = dataset.images.in_bulk({p["image"] for p in lacking})
    filled = 0
    for payload in lacking:
        image = by_id.get(payload["image"])
        if image is not None:
            image.dataset = dataset
            url = image_url(image)
            if url:
                payload["image_url"] = url
                filled += 1
    return filled


def campaign_image_problem(campaign) -> str | None:
    """Why ``campaign`` cannot be published for lack of pictures, in one line, or None when it can.

    Only kinds with ``shows_images`` need pictures. Items frozen without a picture URL (the campaign
    was created before its dataset had an image source) get one now from ``options["image_url"]``
    or the dataset's source (payloads updated in place; call inside the publishing transaction).
    Then every item must have a URL, and for a local folder or uploads every picture must be a
    servable file (URL templates are not fetched by the server: the owner checks them on the
    image check page)."""
    from crowd.models import Image, Item

    if not shows_images(campaign.kind):
        return None
    dataset = campaign.dataset
    try:
        source = source_for(dataset)
    except ImageSourceError as exc:
        return f"dataset {dataset.name!r} has an invalid image source ({exc}); {how_to(dataset.name)}"
    template = (campaign.options or {}).get("image_url") or ""
    items = list(Item.objects.filter(campaign=campaign).only("pk", "payload"))
    lacking = [it for it in items if (it.payload or {}).get("image_key") and not it.payload.get("image_url")]
    if lacking and (template or source is not None):
        by_id = Image.objects.select_related("dataset").in_bulk({it.payload.get("image") for it in lacking})
        for it in lacking:
            image = by_id.get(it.payload.get("image"))
            if image is None:
                continue
            try:
                url = UrlTemplateSource(template).url(dataset, image.key) if template else image_url(image)
            except (CampaignSpecError, ImageSourceError):
                url = None
            if url:
                it.payload = {**it.payload, "image_url": url}
        Item.objects.bulk_update([it for it in lacking if it.payload.get("image_url")], ["payload"], batch_size=1000)
        lacking = [it for it in lacking if not it.payload.get("image_url")]
    if lacking:
        where = "has no image source" if source is None and not template else "cannot give a URL for some of its keys"
        return (f"campaign {campaign.name!r} ({campaign.kind}) shows images but dataset {dataset.name!r} {where} "
                f"({len(lacking):,} of {len(items):,} items have no picture); {how_to(dataset.name)}")
    local_prefix = reverse("crowd:image-file", kwargs={"name": dataset.name, "key": "x"})[:-1]
    local_keys = sorted({it.payload["image_key"] for it in items
                         if str(it.payload.get("image_url", "")).startswith(local_prefix)})
    if local_keys:
        n, first = missing_files(dataset, local_keys)
        if source is None or source.kind not in (FOLDER, UPLOAD):
            n, first = len(local_keys), local_keys[:3]
        if n:
            return (f"campaign {campaign.name!r} shows images but {n:,} of its {len(local_keys):,} pictures are not "
                    f"servable files of dataset {dataset.name!r}'s image source (e.g. {', '.join(first)}); "
                    f"add them, or {how_to(dataset.name)}")
    return None
