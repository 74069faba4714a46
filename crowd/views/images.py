"""Pictures: serving a dataset's local or uploaded image files, the staff upload form, and the
owner's page that checks a sample of a campaign's image URLs in the browser.

Serving (``datasets/<name>/image-files/<key>``) refuses keys that could leave the dataset's
folder (``..``, absolute, NUL, backslash, symlinks resolving outside), names without an image
extension, and files whose first bytes are not an image of that type; it answers with
``X-Content-Type-Options: nosniff``. Datasets are public, so their pictures are too.

The image check page never fetches a URL on the server (no server-side request to a URL an owner
typed): the owner's browser loads each sample picture and reports OK or failed.
"""
from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import FileResponse, Http404
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET, require_http_methods, require_safe

from crowd import images
from crowd.kinds import get_kind
from crowd.models import Dataset, Item
from crowd.views.owner import owned_campaign  # 404 unless the user owns it: names do not leak


#: how many distinct pictures the image check page loads
SAMPLE_SIZE = 12


@require_safe
def image_file(request, name, key):
    """The picture ``key`` of dataset ``name`` from its local folder or uploaded files; 404 when the
    dataset has no local source, ``key`` is not one of its image keys or is refused
    (:func:`crowd.images.check_key`), the file is missing, leaves the folder (symlinks resolved) or
    is not an image of the type its name says (content sniffed)."""
    dataset = get_object_or_404(Dataset, name=name)
    try:
        source = images.source_for(dataset)
    except images.ImageSourceError:
        raise Http404("no image source") from None
    path = source.file(key) if source is not None else None  # checks the key first (no NUL reaches a query)
    # only the dataset's own images: never any other picture that happens to be in the folder
    if path is None or not dataset.images.filter(key=key).exists():
        raise Http404("no such image")
    try:
        handle = open(path, "rb")
    except OSError:
        raise Http404("no such image") from None
    content_type = images.sniff_image_type(handle.read(16))
    if content_type is None or content_type != images.IMAGE_TYPES.get(path.suffix.lower()):
        handle.close()
        raise Http404("not an image")
    handle.seek(0)
    response = FileResponse(handle, content_type=content_type)
    response["X-Content-Type-Options"] = "nosniff"
    response["Cache-Control"] = "public, max-age=3600"
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    return response


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class UploadForm(forms.Form):
    files = forms.FileField(widget=MultipleFileInput(attrs={"multiple": True, "accept": ",".join(images.IMAGE_TYPES)}),
                            required=False, help_text="several pictures at once; each file name must be an image key")


@login_required
@require_http_methods(["GET", "POST"])
def image_upload(request, name):
    """Staff upload pictures for dataset ``name`` (several files at once). Files whose name matches
    an image key, with an image extension, image magic bytes and at most
    :data:`crowd.images.MAX_UPLOAD_BYTES` are stored (each written whole or not at all); the others
    are listed as refused. Storing at least one file makes uploads the dataset's image source."""
    if not request.user.is_staff:
        raise Http404("no such page")
    dataset = get_object_or_404(Dataset, name=name)
    result = None
    if request.method == "POST":
        files = request.FILES.getlist("files")
        if not files:
            messages.error(request, "choose one or more image files to upload")
        else:
            result = images.store_uploads(dataset, files)
    try:
        source = images.source_for(dataset)
    except images.ImageSourceError as exc:
        source, problem = None, str(exc)
    else:
        problem = ""
    return render(request, "crowd/owner/image_upload.html", {
        "dataset": dataset, "form": UploadForm(), "result": result, "source": source, "problem": problem,
        "max_mb": images.MAX_UPLOAD_BYTES // 2**20, "n_images": dataset.images.count(),
    })


@login_required
@require_GET
def image_check(request, name):
    """The owner's check of campaign ``name``'s pictures: up to :data:`SAMPLE_SIZE` distinct image
    URLs of its items, loaded by the owner's browser, each marked OK or failed, with a count."""
    campaign = owned_campaign(request, name)
    kind = get_kind(campaign.kind)
    pictures, seen = [], set()
    for payload in Item.objects.filter(campaign=campaign).order_by("position").values_list("payload", flat=True).iterator():
        key = (payload or {}).get("image_key")
        if key and key not in seen:
            seen.add(key)
            pictures.append({"image": payload.get("image"), "image_key": key, "image_url": payload.get("image_url") or ""})
    # a draft created before its dataset had a source gets these URLs when it is published
    images.fill_urls(campaign.dataset, pictures)
    rows, missing = [], 0
    for picture in pictures:
        key, url = picture["image_key"], picture["image_url"]
        if not url:
            missing += 1
        if len(rows) < SAMPLE_SIZE:
            rows.append({"key": key, "url": url})
    try:
        source = images.source_for(campaign.dataset)
    except images.ImageSourceError as exc:
        source, problem = None, str(exc)
    else:
        problem = ""
    return render(request, "crowd/owner/image_check.html", {
        "campaign": campaign, "rows": rows, "missing": missing, "n_images": len(seen), "source": source,
        "problem": problem, "shows_images": getattr(kind, "shows_images", False),
        "override": campaign.options.get("image_url", ""), "how_to": images.how_to(campaign.dataset.name),
    })
