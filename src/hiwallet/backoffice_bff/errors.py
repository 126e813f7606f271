"""backoffice-bff's error tree: every one is answered as a page (routes' handler), never JSON."""

from __future__ import annotations

from hiwallet.contracts.staff import PermissionMissing
from hiwallet.core.http import NotFound, ProblemError, ServiceUnavailable

__all__ = ["ActionRefused", "NotAllowed", "NothingHere", "ServiceAway"]


class ServiceAway(ServiceUnavailable):
    """An internal service did not answer in time, or answered with its own failure."""

    slug = "backoffice-service-away"
    title = "A service the panel needs is not answering"

    def __init__(self, service: str) -> None:
        super().__init__(f"{service} is not answering", headers={"Retry-After": "5"})
        self.service = service


class NotAllowed(PermissionMissing):
    """The employee lacks the permission (checked here against /v1/me, or said by the service)."""

    kind: str | None = None  # the service's problem type when it said so (e.g. self-escalation)


class NothingHere(NotFound):
    """What the employee asked for does not exist."""


class ActionRefused(ProblemError):
    """The service refused the action (no longer under review, invalid input): its title shown.

    The error page answers 409; ``kind`` is the service's problem type (its last segment, e.g.
    ``last-staff-manager``) and ``fields`` the names of the body's members it found wrong: a form
    drawn again with the refusal beside the field reads them (the texts shown are the
    catalogue's, not the service's)."""

    status = 409
    slug = "backoffice-action-refused"
    title = "The action was refused"

    def __init__(
        self,
        detail: str | None = None,
        *,
        kind: str | None = None,
        fields: tuple[str, ...] = (),
        said: int = 409,
    ) -> None:
        super().__init__(detail)
        self.kind = kind
        self.fields = fields
        self.said = said  # the service's own status (409, 422 …): a form drawn again answers it
