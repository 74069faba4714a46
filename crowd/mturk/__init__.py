"""Amazon Mechanical Turk as a provider of workers (boto3 ``mturk`` client).

* :mod:`.client` -- environments (sandbox by default, live), the boto3 client from the standard AWS
  credential chain, :class:`~.client.MTurkAPI` through which every call goes (log, retries, dry run).
* :mod:`.questions` -- ExternalQuestion / HTMLQuestion XML, QualificationRequirements, the cost
  estimate, the QuestionFormAnswers parser (no Django).
* :mod:`.publish` -- settings, live confirmation, batches: a HIT type and one HIT per item.
* :mod:`.collect` -- the periodic collector and the reconciliation of MTurk's records with ours;
  it confirms the identities our task page only received as claims (URL parameters).
* :mod:`.tokens` -- the signed token forwarded with every answer, checked in MTurk's copy.
* :mod:`.review` -- approve/reject by rules, the bonus ledger, blocks, notifications, expiry.
* :mod:`.website` -- the requester-website route: layout + input CSV out, results CSV in.

The worker-facing ExternalQuestion pages are in :mod:`crowd.views.mturk`; the owner's page and the
``manage.py mturk`` command drive everything above. MTurk has accepted no new requester accounts
since 2026-07-30 (existing accounts keep working), so nothing here is needed to run a campaign with
the local rater pool, and no test needs an AWS account: botocore's Stubber checks every call
against the real service model and a fake MTurk drives the end-to-end test.
"""
