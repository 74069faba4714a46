"""Hostile data for the escaping tests: a real Flickr8k-Expert subset whose image keys, system names,
captions and description carry attack strings (HTML/JS for the pages, spreadsheet formulas for the
CSV downloads). Used by tests/test_xss_browser.py and tests/test_csv_injection.py."""
from django.db import transaction

from crowd.models import Caption, Dataset, HumanJudgment, System

from .conftest import run_command, write_subset

#: HTML / JavaScript / template / mathtext payloads; a page is clean when none of them ran
XSS = [
    "<script>window.__pwned=1</script>",
    '<img src=x onerror="window.__pwned=2">',
    '"><svg onload=window.__pwned=3>',
    "</script><script>window.__pwned=4</script>",
    "javascript:window.__pwned=5",
    "{{ 7*7 }}",
    "$\\frac{a}{b}$ $unbalanced",
    "$\\notacommand{x}$ <svg/onload=alert(6)>",  # mathtext that does not parse; an alert
]

#: spreadsheet formula payloads (OWASP CSV injection), and a text that already starts with a quote
FORMULAS = [
    '=HYPERLINK("http://x","y")',
    "+1+1",
    "-2+3",
    "@SUM(A1)",
    "\t=1",
    "\r=1",
    "=cmd|' /C calc'!A0",
    "'=2+5",
]


def hostile_dataset(tmp_path, name: str, payloads: list[str], reference_prefix: str = "") -> Dataset:
    """Import the first ``len(payloads)`` judged images of Flickr8k-Expert as ``name``, then (ORM, one
    transaction) make the payloads its data: image ``i``'s key is ``payloads[i]``; the candidate
    system is renamed ``payloads[0]``, the reference system ``payloads[1]``; half of each image's
    candidates (with their judgments) move to a second candidate system ``payloads[2]``; candidate
    caption ``j`` becomes ``payloads[j % n] + " " + text``; the first reference of every image is
    prefixed with ``reference_prefix``; description and citation hold every payload."""
    n = len(payloads)
    run_command("import_dataset", "flickr8k-expert", str(write_subset(tmp_path / f"{name}-source", n)), "--name", name)
    ds = Dataset.objects.get(name=name)
    with transaction.atomic():
        ds.description = " | ".join(payloads)
        ds.citation = payloads[-1]
        ds.save()
        for image, key in zip(ds.images.order_by("key"), payloads):
            image.key = key
            image.save()
        candidates = System.objects.get(dataset=ds, name="expert-candidates")
        other = System.objects.create(dataset=ds, name=payloads[2], kind=System.MODEL, description=payloads[3])
        for j, caption in enumerate(ds.candidates().order_by("image__key", "key")):
            caption.text = f"{payloads[j % n]} {caption.text}"
            if j % 2:
                caption.system = other
                HumanJudgment.objects.filter(caption=caption).update(system=other)
            caption.save()
        candidates.name = payloads[0]
        candidates.save()
        ds.reference_system.name = payloads[1]
        ds.reference_system.save()
        if reference_prefix:
            for image in ds.images.all():
                first = Caption.objects.filter(image=image, system=ds.reference_system).order_by("key").first()
                first.text = f"{reference_prefix} {first.text}"
                first.save()
    return ds


def upload_metric(ds: Dataset, tmp_path, name: str, sign: float) -> str:
    """Upload a metric called ``name`` whose score of each judged candidate is ``sign`` x its mean
    human rating plus a small id-based jitter (so ``sign=-1`` correlates negatively). Returns its key."""
    from django.db.models import Avg

    from metrics.uploads import metric_key

    means = (HumanJudgment.objects.filter(image__dataset=ds, caption__isnull=False)
             .values("caption_id").annotate(m=Avg("score")).values_list("caption_id", "m"))
    key = metric_key(name)
    path = tmp_path / f"{key}.csv"
    path.write_text("caption_id,score\n" + "".join(
        f"{cid},{sign * mean + (cid % 7) / 100:.4f}\n" for cid, mean in sorted(means)), encoding="utf-8")
    run_command("upload_scores", "--dataset", ds.name, "--name", name, "--file", str(path))
    return key
