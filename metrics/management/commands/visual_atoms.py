"""``manage.py visual_atoms --dataset NAME [--system S] [--top 150] [--exclude be] [--out atoms.csv]``.

Extracts visual atoms (Yao et al. 2016, Sec. 5.1: entities = nouns and personal pronouns, actions =
verbs, attributes = adjectives, by Penn part-of-speech tags, lemmatised) from a dataset's captions,
prints the most frequent per category and writes them as the CSV that
``create_campaign visual_atom --atoms FILE`` reads (the "is this word visual?" vote).
"""
from django.core.management.base import BaseCommand, CommandError

from crowd.models import Caption
from metrics import pipeline
from captioneval.kernels import atoms


class Command(BaseCommand):
    help = "Extract visual atoms (entities, actions, attributes) with frequencies; write the vote campaign's CSV."

    def add_arguments(self, parser):
        parser.add_argument("--dataset", required=True)
        parser.add_argument("--system", help="only this system's captions (default: the references, else all)")
        parser.add_argument("--all-systems", action="store_true", help="every caption of the dataset")
        parser.add_argument("--top", type=int, default=150, help="atoms per category (default 150, as the paper)")
        parser.add_argument("--exclude", nargs="*", default=[], help="lemmas to leave out, e.g. be have")
        parser.add_argument("--out", help="write the top atoms as word,category,count CSV here")

    def handle(self, *args, dataset, system, all_systems, top, exclude, out, **options):
        try:
            ds = pipeline.get_dataset(dataset)
        except pipeline.PipelineError as exc:
            raise CommandError(str(exc)) from None
        if top < 1:
            raise CommandError("--top must be at least 1")
        qs = Caption.objects.filter(image__dataset=ds)
        if system:
            qs = qs.filter(system__name=system)
            what = f"system {system!r}"
        elif not all_systems and ds.reference_system_id:
            qs = qs.filter(system_id=ds.reference_system_id)
            what = "the references"
        else:
            what = "all systems"
        texts = list(qs.order_by("id").values_list("text", flat=True))
        if not texts:
            raise CommandError(f"no captions for {what} in dataset {ds.name!r}")
        parsed = atoms.extract_atoms(texts)
        freq = atoms.atom_frequencies(parsed, exclude=exclude)
        self.stdout.write(f"{len(texts):,} captions of {what} in {ds.name!r}")
        for category in atoms.CATEGORIES:
            counter = freq[category]
            head = ", ".join(f"{w} {c}" for w, c in sorted(counter.items(), key=lambda wc: (-wc[1], wc[0]))[:10])
            self.stdout.write(f"{category}: {len(counter):,} distinct, {sum(counter.values()):,} occurrences; top: {head}")
        if out:
            rows = atoms.top_atoms(parsed, n=top, exclude=exclude)
            n = atoms.write_atoms_csv(rows, out)
            self.stdout.write(f"wrote {n} atoms to {out}; next: python manage.py create_campaign visual_atom "
                              f"--dataset {ds.name} --name <name> --atoms {out}")
