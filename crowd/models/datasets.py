"""Human-side data: what was captioned, by whom, and what people thought of it.

A :class:`Dataset` holds :class:`Image` s. Every caption belongs to one image and one
:class:`System` (a captioning model, a retrieval system, or the humans who wrote the reference
captions); the captions of one system for one image form that system's *caption set* for the
image. The dataset names which system provides the reference captions. :class:`HumanJudgment`
rows are ratings of candidate captions, one row per rater and criterion.
"""
from django.db import models


class Dataset(models.Model):
    """A named collection of images, captions and human judgments (e.g. Flickr8k-Expert)."""

    name = models.SlugField(max_length=100, unique=True)
    kind = models.CharField(max_length=50, help_text="importer that created it, e.g. flickr8k-expert")
    description = models.TextField(blank=True)
    citation = models.TextField(blank=True)
    fingerprint = models.CharField(
        max_length=64, blank=True, help_text="SHA-256 of the imported files; re-imports compare it"
    )
    reference_system = models.ForeignKey(
        "System", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="the system whose captions are the references metrics compare against",
    )
    criterion = models.CharField(max_length=50, blank=True, help_text="what the human judgments rate")
    scale_min = models.FloatField(null=True, blank=True)
    scale_max = models.FloatField(null=True, blank=True)
    protocol = models.JSONField(
        default=dict, blank=True,
        help_text='how reports must treat the dataset, set by its importer: {"task": "rating" | "forced_choice", '
        '"rows": "rating" (every rating is a correlation row) | "mean" (one row per caption, its mean score), '
        '"headline": "kendall_tau_c" | "kendall_tau_b" | "pearson" | "accuracy", "criteria": [...], '
        '"summary": "...", "source": "paper, table", ...}',
    )
    image_source = models.CharField(
        max_length=10, blank=True, default="",
        choices=[("", "none"), ("url", "URL template"), ("coco", "public COCO server"), ("folder", "local folder"),
                 ("upload", "uploaded files")],
        help_text="where the pictures come from (crowd.images): a URL template, the COCO server, a local folder, uploaded files",
    )
    image_location = models.CharField(
        max_length=2000, blank=True, default="",
        help_text="the URL template (with {key}), the COCO split or the absolute folder path; empty for uploads",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    #: ``protocol["task"]`` of a benchmark of graded judgments (each caption rated on a scale or voted
    #: yes/no; correlations are its statistics). A benchmark protocol, not a campaign's task kind.
    TASK_RATING = "rating"
    #: ``protocol["task"]`` of a pairwise forced-choice benchmark (PASCAL-50S: the statistic is the
    #: share of pairs where the metric prefers the human majority's caption).
    TASK_FORCED_CHOICE = "forced_choice"
    #: ``protocol["rows"]``: every rating is a correlation row (Flickr8k-Expert, THumB)
    ROWS_RATING = "rating"
    #: ``protocol["rows"]``: one row per caption, the mean of its judgments (Flickr8k-CrowdFlower)
    ROWS_MEAN = "mean"

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    def candidates(self):
        """Captions that are evaluated: those of every system except the reference system."""
        qs = Caption.objects.filter(image__dataset=self)
        if self.reference_system_id:
            qs = qs.exclude(system_id=self.reference_system_id)
        return qs

    def references(self):
        """The reference captions (captions of the reference system)."""
        return Caption.objects.filter(image__dataset=self, system_id=self.reference_system_id)


class Image(models.Model):
    """One image of a dataset, identified by its key in the source (e.g. the Flickr file name)."""

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="images")
    key = models.CharField(max_length=255)
    url = models.URLField(blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["dataset", "key"], name="image_unique_key")]
        ordering = ["dataset", "key"]

    def __str__(self):
        return self.key


class System(models.Model):
    """A source of captions: a captioning model, a retrieval system, or human writers."""

    HUMAN, MODEL, RETRIEVAL = "human", "model", "retrieval"
    KIND_CHOICES = [(HUMAN, "human"), (MODEL, "model"), (RETRIEVAL, "retrieval")]

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="systems")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=20, choices=KIND_CHOICES)
    description = models.TextField(blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["dataset", "name"], name="system_unique_name")]
        ordering = ["dataset", "name"]

    def __str__(self):
        return self.name


class Caption(models.Model):
    """One caption of one image by one system; ``key`` is its id in the source data."""

    image = models.ForeignKey(Image, on_delete=models.CASCADE, related_name="captions")
    system = models.ForeignKey(System, on_delete=models.CASCADE, related_name="captions")
    key = models.CharField(max_length=255)
    text = models.TextField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["image", "system", "key"], name="caption_unique_key"),
        ]
        indexes = [models.Index(fields=["system", "image"])]
        ordering = ["image", "system", "key"]

    def __str__(self):
        return self.text


class ObjectLabel(models.Model):
    """An object category present in an image, with its number of instances.

    From annotations (e.g. COCO instance categories) or a detector's output; VIFIDEL (Madhyastha
    et al. 2019) compares a caption with this bag of labels. ``source`` names the file it came from.
    """

    image = models.ForeignKey(Image, on_delete=models.CASCADE, related_name="object_labels")
    label = models.CharField(max_length=100)
    count = models.PositiveIntegerField(default=1)
    source = models.CharField(max_length=255, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["image", "label"], name="objectlabel_unique")]
        ordering = ["image", "-count", "label"]

    def __str__(self):
        return f"{self.label} x{self.count}"


class HumanJudgment(models.Model):
    """One rater's score on one criterion of one candidate caption, or of one caption set.

    Caption-level judgments (e.g. Flickr8k-Expert quality, campaign relevance) have ``caption`` set;
    set-level judgments (caption-set diversity, Wang & Chan 2019) have ``caption`` empty and name the
    caption set by ``image`` and ``system``. ``image`` and ``system`` are always filled, so both kinds
    can be grouped by image. Judgments collected by a campaign point at it; imported ones do not.
    """

    image = models.ForeignKey(Image, on_delete=models.CASCADE, related_name="judgments")
    system = models.ForeignKey(System, on_delete=models.CASCADE, related_name="judgments")
    caption = models.ForeignKey(
        Caption, null=True, blank=True, on_delete=models.CASCADE, related_name="judgments",
        help_text="empty for a judgment of the whole caption set (image, system)",
    )
    criterion = models.CharField(max_length=50)
    rater = models.CharField(max_length=100)
    score = models.FloatField()
    source = models.CharField(max_length=100, blank=True, help_text="import or campaign it came from")
    campaign = models.ForeignKey(
        "crowd.Campaign", null=True, blank=True, on_delete=models.CASCADE, related_name="judgments",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["caption", "criterion", "rater"], name="judgment_unique_rater",
                condition=models.Q(caption__isnull=False),
            ),
            models.UniqueConstraint(
                fields=["image", "system", "criterion", "rater"], name="set_judgment_unique_rater",
                condition=models.Q(caption__isnull=True),
            ),
        ]
        indexes = [models.Index(fields=["campaign", "criterion"])]
        ordering = ["image", "system", "caption", "criterion", "rater"]

    def __str__(self):
        return f"{self.rater}: {self.score}"


class PairwiseJudgment(models.Model):
    """A forced choice: which of two candidate captions B and C is closer to reference A
    (PASCAL-50S protocol, Vedantam et al. 2015, Sec. 4). ``choice`` is ``"b"`` or ``"c"``.

    ``reference`` is empty when the choice was made against the image itself and is evaluated
    against the image's whole reference set (the imported PASCAL-50S votes); campaigns always set it.
    Each rater judges a (reference, B, C) triple once, or a (B, C) pair once when ``reference`` is empty.
    """

    B, C = "b", "c"
    reference = models.ForeignKey(
        Caption, null=True, blank=True, on_delete=models.CASCADE, related_name="+",
        help_text="the reference A the rater compared with; empty = judged against the image's reference set",
    )
    caption_b = models.ForeignKey(Caption, on_delete=models.CASCADE, related_name="+")
    caption_c = models.ForeignKey(Caption, on_delete=models.CASCADE, related_name="+")
    rater = models.CharField(max_length=100)
    choice = models.CharField(max_length=1, choices=[(B, "B"), (C, "C")])
    source = models.CharField(max_length=100, blank=True)
    campaign = models.ForeignKey(
        "crowd.Campaign", null=True, blank=True, on_delete=models.CASCADE, related_name="pairwise_judgments",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["reference", "caption_b", "caption_c", "rater"], name="pairwise_unique_rater"),
            models.UniqueConstraint(
                fields=["caption_b", "caption_c", "rater"], name="pairwise_unique_rater_no_reference",
                condition=models.Q(reference__isnull=True),
            ),
            models.CheckConstraint(condition=models.Q(choice__in=["b", "c"]), name="pairwise_choice_b_or_c"),
        ]

    def __str__(self):
        return f"{self.rater}: {self.choice}"
