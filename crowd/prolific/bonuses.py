"""Bonuses on Prolific through a ledger (:class:`~crowd.models.ProlificBonus`): create once, pay once.

Prolific pays bonuses in two steps (API reference, "Bonuses"): ``POST
/submissions/bonus-payments/`` with ``study_id`` and ``csv_bonuses`` (lines
``<participant id>,<amount>``, amounts in the study currency's MAJOR units, e.g. ``1.50`` for
£1.50 -- "an amount of 30 will pay £/$30.00") sets up a bulk bonus and pays nothing; ``POST
/bulk-bonus-payments/{id}/pay/`` pays it, asynchronously, and is NOT idempotent ("sending multiple
requests with the same bulk bonus payment ID will result in participants being paid multiple
times"). So:

* :func:`create_bonus` creates at most one bulk bonus per ``request_key`` (default: a hash of the
  study and the normalised CSV, so a double click or a re-run creates nothing new);
* :func:`pay` saves the state ``paying`` (committed) BEFORE the pay call; a call that fails
  without an answer (timeout, connection lost) leaves ``paying``; any later attempt on a ``paying``
  (or ``failed``) bonus first reads the bulk bonus (``GET /bulk-bonus-payments/{id}/``, path to
  verify against Prolific's documentation) and pays only if Prolific says it was not paid; a
  ``paid`` bonus is never paid again. On PostgreSQL an advisory lock keeps two concurrent pay
  attempts of one bonus apart.
"""
from __future__ import annotations

import hashlib
import re
from decimal import Decimal

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from crowd.models import ProlificBonus, ProlificStudy, ProlificSubmission

#: one bonus line's amount: a decimal in major units with at most two decimals
AMOUNT_RE = re.compile(r"^\d{1,6}(\.\d{1,2})?$")
#: refuse a single bonus above this (major units): a guard against minor units typed as major ones
#: ("150" meant as 150 pence would pay £150). Our choice, not Prolific's.
MAX_AMOUNT = Decimal("100.00")
MAX_LINES = 5000
ID_RE = re.compile(r"^[0-9A-Za-z]{1,64}$")
#: bulk bonus states Prolific may report, read as paid (or being paid) / not paid; verify the names
PAID_STATES = {"PAID", "PAYING", "PROCESSING", "PROCESSED", "COMPLETED", "SUCCEEDED"}
UNPAID_STATES = {"CREATED", "PENDING", "UNPAID", "NOT_PAID", "FAILED", "CANCELLED"}


class BonusError(Exception):
    """A bonus refused or left in a state that needs a look (one line)."""


def parse_csv(study: ProlificStudy, text: str) -> list[dict]:
    """Lines ``participant_id,amount`` -> [{"participant_id", "amount": "1.50"}]. Blank lines and a
    header line ``participant_id,amount`` are skipped. Raises BonusError naming the line for a bad
    participant id, a participant with no submission Prolific reported in this study, a repeated
    participant, an amount that is not a decimal in major units (e.g. ``1.50``), zero, or above
    :data:`MAX_AMOUNT`."""
    entries, seen = [], set()
    lines = (text or "").replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if len(lines) > MAX_LINES:
        raise BonusError(f"at most {MAX_LINES} lines per bonus")
    known = set(ProlificSubmission.objects.filter(study=study).values_list("participant_id", flat=True))
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.replace(" ", "").lower() == "participant_id,amount":
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 2:
            raise BonusError(f"line {n}: expected 'participant_id,amount'")
        pid, amount = parts
        if not ID_RE.match(pid):
            raise BonusError(f"line {n}: bad participant id {pid[:70]!r}")
        if pid not in known:
            raise BonusError(f"line {n}: participant {pid} has no submission in this study (sync first?)")
        if pid in seen:
            raise BonusError(f"line {n}: participant {pid} appears twice")
        if not AMOUNT_RE.match(amount):
            raise BonusError(f"line {n}: amount {amount[:20]!r} is not a decimal in major units such as 1.50")
        value = Decimal(amount).quantize(Decimal("0.01"))
        if value <= 0:
            raise BonusError(f"line {n}: a bonus must be positive")
        if value > MAX_AMOUNT:
            raise BonusError(f"line {n}: {value} is above the {MAX_AMOUNT} cap per participant "
                             "(amounts are in major units: 1.50 is £1.50, not 150)")
        seen.add(pid)
        entries.append({"participant_id": pid, "amount": f"{value:.2f}"})
    if not entries:
        raise BonusError("no bonus line")
    return entries


def csv_of(entries: list[dict]) -> str:
    """The ``csv_bonuses`` text Prolific takes."""
    return "\n".join(f"{e['participant_id']},{e['amount']}" for e in entries)


def default_key(study: ProlificStudy, entries: list[dict]) -> str:
    """The ledger key of a bonus without one: a hash of the study and its lines (62 characters)."""
    return "b-" + hashlib.sha256(f"{study.study_id}\n{csv_of(entries)}".encode()).hexdigest()[:60]


def create_bonus(study: ProlificStudy, api, csv_text: str, *, request_key: str = "", reason: str = "",
                 user: str = "") -> ProlificBonus:
    """Ledger entry + ``POST /submissions/bonus-payments/`` once per ``request_key``. The same key
    again returns the existing bonus (its creation call is repeated only if it never got an id; a
    created bulk bonus pays nothing). The same key with other lines is refused. Raises BonusError
    (bad CSV, no study id) or the client's ProlificError (nothing paid; the ledger row stays
    without an id and a retry with the same key creates it)."""
    if not study.study_id:
        raise BonusError("the study has not been created on Prolific yet")
    entries = parse_csv(study, csv_text)
    key = (request_key or "").strip() or default_key(study, entries)
    if len(key) > 64 or not re.fullmatch(r"[-\w.:]+", key):
        raise BonusError("the request key must be 1-64 letters, digits or -_.:")
    total = sum((Decimal(e["amount"]) for e in entries), Decimal("0"))
    try:
        with transaction.atomic():
            bonus, created = ProlificBonus.objects.get_or_create(
                request_key=key, defaults={"study": study, "entries": entries, "total": total,
                                           "reason": (reason or "").strip(), "created_by": (user or "")[:150]})
    except IntegrityError:
        bonus, created = ProlificBonus.objects.get(request_key=key), False
    if not created and (bonus.study_id != study.pk or bonus.entries != entries):
        raise BonusError(f"request key {key} was used for another bonus")
    if bonus.bonus_id:
        return bonus
    answer = api.create_bonus(study.study_id, csv_of(entries))
    if getattr(api, "dry_run", False):
        return bonus
    bid = str((answer or {}).get("id") or "")
    if not ID_RE.match(bid):
        raise BonusError("Prolific's answer has no bulk bonus id")
    bonus.bonus_id, bonus.detail = bid, {"created": answer}
    bonus.save(update_fields=["bonus_id", "detail"])
    return bonus


def remote_paid(record: dict) -> bool | None:
    """What Prolific's bulk bonus record says: True paid (or being paid), False not paid, None unknown."""
    status = str((record or {}).get("status") or (record or {}).get("state") or "").upper()
    if status in PAID_STATES:
        return True
    if status in UNPAID_STATES:
        return False
    return None


class _PayLock:
    """A PostgreSQL session advisory lock per bonus, held across the pay call (no-op elsewhere)."""

    def __init__(self, pk: int):
        self.key, self.held = 0x50524F4C00000000 // 2 + pk, False

    def __enter__(self):
        if connection.vendor == "postgresql":
            with connection.cursor() as c:
                c.execute("SELECT pg_try_advisory_lock(%s)", [self.key])
                self.held = bool(c.fetchone()[0])
            if not self.held:
                raise BonusError("another pay attempt of this bonus is under way")
        return self

    def __exit__(self, *exc):
        if self.held:
            with connection.cursor() as c:
                c.execute("SELECT pg_advisory_unlock(%s)", [self.key])


def pay(bonus: ProlificBonus, api, *, user: str = "") -> ProlificBonus:
    """Pay a created bonus exactly once (see the module docstring). Returns the bonus (state
    ``paid``). Raises BonusError: not created on Prolific, Prolific's state unknown, or the pay
    call got no answer (state left ``paying``: the next attempt reads Prolific's state first);
    a pay call Prolific refuses (4xx) sets ``failed`` and raises."""
    from crowd.prolific_client import ProlificError, ProlificUnavailable

    if getattr(api, "dry_run", False):
        raise BonusError("a dry run cannot pay; nothing was sent")
    with _PayLock(bonus.pk):
        bonus.refresh_from_db()
        if bonus.state == ProlificBonus.PAID:
            return bonus
        if not bonus.bonus_id:
            raise BonusError("the bonus was not created on Prolific yet (create it first)")
        if bonus.state in (ProlificBonus.PAYING, ProlificBonus.FAILED):
            record = api.get_bonus(bonus.bonus_id)
            paid = remote_paid(record)
            bonus.detail = dict(bonus.detail or {}, checked=record)
            if paid:
                bonus.state, bonus.paid_at = ProlificBonus.PAID, bonus.paid_at or timezone.now()
                bonus.save(update_fields=["state", "paid_at", "detail"])
                return bonus
            if paid is None:
                bonus.save(update_fields=["detail"])
                raise BonusError(f"Prolific's state of bonus {bonus.bonus_id} is unknown "
                                 f"({str(record.get('status') or record.get('state'))[:30]!r}); not paying")
        with transaction.atomic():
            bonus.state, bonus.pay_sent_at = ProlificBonus.PAYING, timezone.now()
            bonus.detail = dict(bonus.detail or {}, paid_by=(user or "")[:150])
            bonus.save(update_fields=["state", "pay_sent_at", "detail"])
        try:
            answer = api.pay_bonus(bonus.bonus_id)
        except ProlificUnavailable as exc:
            raise BonusError(f"the pay call got no answer ({exc}); bonus {bonus.bonus_id} left PAYING: "
                             "the next attempt reads Prolific's state before paying") from None
        except ProlificError as exc:
            if exc.status is not None and 400 <= exc.status < 500:
                bonus.state, bonus.detail = ProlificBonus.FAILED, dict(bonus.detail or {}, error=str(exc)[:500])
                bonus.save(update_fields=["state", "detail"])
                raise BonusError(f"Prolific refused to pay bonus {bonus.bonus_id}: {exc}") from None
            raise BonusError(f"the pay call failed ({exc}); bonus left PAYING") from None
        bonus.state, bonus.paid_at = ProlificBonus.PAID, timezone.now()
        bonus.detail = dict(bonus.detail or {}, paid=answer if isinstance(answer, (dict, str)) else str(answer))
        bonus.save(update_fields=["state", "paid_at", "detail"])
    return bonus
