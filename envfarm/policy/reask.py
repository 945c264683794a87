"""Asking once more for token data an answer came without.

An answer that lacks token data its profile asks for (``TokenData.missing``: a field absent,
not inconsistent) is not corrupt: the request went out with other fields (the fallback, before
the first answer settled the profile; a user's ``extra_body``), or the server did not honour
them this once. The request is sent again once, with the settled profile's fields, and the turn
is the second answer (a fresh sample; the first is discarded, as an aborted generation is).
When that answer lacks the data too, or the request fails, the turn is kept without token data
(``token_source: "none"`` and ``token_source_reason``): the episode stays valid and is graded,
and merged training samples split around the turn (``envfarm.models.samples``). Data that is
present but inconsistent (a fault) is never asked again: it makes the trajectory invalid
(``envfarm.controller.training_data``). Each re-ask logs one warning and is recorded on its turn
(``token_reask``), so runs count them.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from envfarm.errors import PolicyConfigError, PolicyError
from envfarm.policy.attempts import AttemptFailure
from envfarm.policy.base import Completion
from envfarm.policy.tokens import TokenData

log = logging.getLogger(__name__)

Ask = Callable[[], Awaitable[Completion | AttemptFailure]]
"""Sends the request again (one attempt)."""


def needs_reask(result: object) -> bool:
    """A completion whose token data is absent, with no fault beside it."""
    return isinstance(result, Completion) and result.tokens is not None and result.tokens.lacking


async def reasked(first: Completion, ask: Ask, *, endpoint: str, profile: str) -> Completion:
    """The turn of ``first``, an answer that lacked its token data, after asking once more."""
    if first.tokens is None:
        return first
    lacked = "; ".join(first.tokens.missing)
    try:
        answer = await ask()
    except PolicyConfigError:
        raise
    except PolicyError as exc:
        answer = AttemptFailure(str(exc))
    second = answer.cause if isinstance(answer, AttemptFailure) else answer
    if isinstance(second, str):
        reason = f"the answer lacked its token data ({lacked}); asking again failed: {second}"
        kept, tokens = first, first.tokens.without_data(reason)
        outcome = f"asking again failed ({second}); the turn has no token data"
    else:
        kept, tokens = second, second.tokens or TokenData(missing=["the answer was not read"])
        outcome = "the second answer has it"
        if tokens.lacking:
            missing = "; ".join(tokens.missing)
            tokens = tokens.without_data(f"asked again, the answer still lacked it: {missing}")
            outcome = "the second answer lacks it too; the turn has no token data"
    tokens.token_reask = lacked
    kept.tokens, kept.attempts = tokens, first.attempts + 1
    log.warning(
        "policy endpoint %s: an answer came without its token data (%s); asked again with the "
        "%s profile's fields: %s",
        endpoint,
        lacked,
        profile,
        outcome,
    )
    return kept
