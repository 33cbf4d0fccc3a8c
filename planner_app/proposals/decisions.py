"""Proposals as the pages, the API and the admin serve them: found, described, decided.

Applying and dismissing are store.py's; this module gives the three edges one way to
find a proposal, read its change and backtest, and turn a refusal (decided already, the
rules changed since the operator looked, the change no longer fits) into one message
and status, so none of them answers a 500 for something an operator or agent did.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.http import HttpRequest
from django.urls import reverse

from planner_app import ruleset_versions
from planner_app.models import Proposal
from planner_app.proposals.changes import ChangeError, describe
from traces_app.http.paging import SortKey
from traces_app.models import ApiKey

# The most supported first (ties: the newest row first), for the API and the page alike.
BY_SUPPORT = SortKey("evidence_count", kind="number")
MAX_ID = 2**63 - 1  # the largest id a database holds; beyond it nothing can be found


class Refused(Exception):
    """A decision that was not made, with the HTTP status that says why (404 or 409)."""

    def __init__(self, message: str, status: int = 409) -> None:
        super().__init__(message)
        self.status = status


def find(pk: int) -> Proposal | None:
    """Return proposal `pk` (with who decided it), or None."""
    if not 1 <= pk <= MAX_ID:
        return None
    return Proposal.objects.select_related("decided_by", "workflow").filter(pk=pk).first()


def described(proposal: Proposal) -> str:
    """Return the proposal's change as one line."""
    if proposal.kind == Proposal.Kind.WORKFLOW:
        return f"new workflow {proposal.target}"
    return "; ".join(describe(op) for op in proposal.ops) or "(no change)"


def backtest_counts(proposal: Proposal) -> dict[str, Any]:
    """Return the backtest without its examples: the counts and versions only."""
    return {k: v for k, v in (proposal.backtest or {}).items() if not isinstance(v, list | dict)}


def page_of(proposal: Proposal) -> str:
    """Return the address of the proposal's page."""
    return reverse("proposal-detail", args=[proposal.pk])


def acting_user(request: HttpRequest) -> Any:
    """Return the logged-in user making the decision, or None for an API key."""
    user = getattr(request, "user", None)
    return user if user is not None and user.is_authenticated else None


def acting_key(request: HttpRequest) -> str:
    """Return the API key making the decision, as "API key 'name' (prefix…)", or ""."""
    key = getattr(request, "auth", None)
    return f"API key {key.name!r} ({key.prefix}…)" if isinstance(key, ApiKey) else ""


def apply(pk: int, user: Any = None, seen_version: int | None = None, via: str = "") -> Proposal:
    """Apply the proposal (store.apply_proposal); Refused says why it was not."""
    from planner_app.proposals import store

    with refusals():
        return store.apply_proposal(_storable(pk), user, seen_version, via)


def dismiss(pk: int, user: Any = None, seen_version: int | None = None, via: str = "") -> Proposal:
    """Dismiss the proposal (store.dismiss_proposal); Refused says why it was not."""
    from planner_app.proposals import store

    with refusals():
        return store.dismiss_proposal(_storable(pk), user, via)


def _storable(pk: int) -> int:
    """Return `pk`, or raise Proposal.DoesNotExist for one no database column can hold."""
    if not 1 <= pk <= MAX_ID:
        raise Proposal.DoesNotExist(f"no proposal #{pk}")
    return pk


def refresh() -> Any:
    """Mine the recorded traffic again (store.refresh_proposals) and return its report."""
    from planner_app.proposals import store

    return store.refresh_proposals()


def current_version() -> int:
    """Return the rule-set version a page shows, read before the rows it shows."""
    return ruleset_versions.latest_number()


@contextmanager
def refusals() -> Iterator[None]:
    """Turn the store's refusals into Refused, with its message (it says nothing was done)."""
    from planner_app.proposals import store

    try:
        yield
    except Proposal.DoesNotExist:
        raise Refused("no such proposal (a refresh removed it?)", status=404) from None
    except (store.ProposalError, ruleset_versions.RulesChanged) as exc:
        raise Refused(str(exc)) from None
    except ChangeError as exc:
        raise Refused(f"The change no longer fits the rules: {exc}. Nothing was changed.") from None
