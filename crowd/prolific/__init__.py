"""Prolific as a campaign provider (issue 17; docs/prolific.md).

- :mod:`.client`: :class:`~.client.ProlificAPI`, the only place that talks to Prolific's API
  (httpx; token from the environment, never stored; retries; every call logged as ProlificCall;
  dry runs).
- :mod:`.study`: the study behind a campaign: draft body, cost, publish (confirmed), pause,
  resume, stop, add places.
- :mod:`.sync`, :mod:`.webhooks`, :mod:`.review`, :mod:`.bonuses`, :mod:`.reconcile`: submissions,
  reviews, bonuses and the reconciliation report.
- :mod:`.commands_study`, :mod:`.commands_review`: the subcommands of ``manage.py prolific``.

The provider itself (claims from ``PROLIFIC_PID``/``STUDY_ID``/``SESSION_ID``, confirmation,
completion codes) is :class:`crowd.providers.prolific.ProlificProvider`.
"""
