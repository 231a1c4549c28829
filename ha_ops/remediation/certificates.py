"""The controller as its cluster's certificate issuer (ha_ops.security.issuer): renewals for callers that present a
valid certificate, enrollments of agent pods by their Kubernetes service account token, and its own serving
certificate, renewed before it expires.

Enrollment trusts the API server, not the request: the agent sends its pod's projected service account token (an
audience of its own, so the token is good for nothing else), the controller asks the API server to review it
(TokenReview), and the certificate names the node the review says the pod is bound to. A token of another service
account, of another audience, or without a node, gets no certificate; the CN never comes from the request."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ha_ops.security import tls
from ha_ops.security.issuer import Issuer, IssuerFiles, Template, template_for, template_of
from ha_ops.security.pki import CONTROLLERS, renewal_due
from ha_ops.spec.load import validation_problems
from ha_ops.util.models import ConfigModel

log = logging.getLogger(__name__)
NODE_NAME_KEY = "authentication.kubernetes.io/node-name"
DEFAULT_AUDIENCE = "ha-ops-controller"


class EnrollmentConfig(ConfigModel):
    """Agent pods on Kubernetes get their first certificate with their service account token, on a port of its own
    (TLS, no client certificate asked: they have none yet)."""

    port: int = Field(8801, ge=1, le=65535)
    audience: str = Field(DEFAULT_AUDIENCE, min_length=1, description="The audience the agents' tokens are made for.")
    agent_service_account: str = Field(
        "system:serviceaccount:ha-ops:ha-ops-agent", min_length=1, description="The agents' service account, as the "
        "API server names it in a token review: only its tokens are enrolled."
    )  # fmt: skip


class CertificatesConfig(ConfigModel):
    issuer: IssuerFiles
    serve_names: list[str] = Field(
        default_factory=list,
        description="When set, the controller issues its own serving certificate (into tls.cert_file and "
        "tls.key_file) for these DNS names and addresses, and renews it: on Kubernetes, its Service's names and (from "
        "`controller run --address`) its pod's address.",
    )
    enrollment: EnrollmentConfig | None = None
    max_issued_per_identity: int = Field(
        6, ge=1, le=10_000, description="Certificates issued to one identity (a renewal's, or an enrolled node's) "
        "within issue_window_s (or the certificates' lifetime, if shorter: a renewal is due at two thirds of it, so "
        "a window of one lifetime needs two); more are refused with 429 until the window moves on. A caller that "
        "asks again and again wants the issuer's time, not a certificate."
    )  # fmt: skip
    issue_window_s: float = Field(600.0, gt=0, le=86_400)


class EnrollmentRefused(Exception):
    """A token that enrolls nobody (403, naming why)."""


class TooManyRequests(Exception):
    """More certificates asked for one identity than the rate allows (429, naming when to ask again)."""

    def __init__(self, message: str, retry_after_s: float) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ReviewUnreadable(ConnectionError):
    """The API server's token review answered something that is not a TokenReview status (503, naming the field)."""


class _ReviewUser(BaseModel):
    model_config = ConfigDict(extra="ignore")
    username: str = ""
    extra: dict[str, list[str]] = Field(default_factory=dict)


class _ReviewStatus(BaseModel):
    """The fields of a TokenReview's status that enrollment reads (its types checked: an answer that is not one is
    the API server's failure, never a certificate)."""

    model_config = ConfigDict(extra="ignore")
    authenticated: bool = False
    error: str = ""
    audiences: list[str] = Field(default_factory=list)
    user: _ReviewUser = _ReviewUser()


def enrolled_node(review: Mapping[str, Any], audience: str, account: str) -> str:
    """The node a TokenReview's status (as the API returns it) vouches for, or EnrollmentRefused naming why not
    (ReviewUnreadable: the status is not one)."""
    try:
        status = _ReviewStatus.model_validate(review)
    except ValidationError as exc:
        raise ReviewUnreadable("the token review's answer is not a TokenReview status: "
                               + "; ".join(validation_problems(exc))) from None  # fmt: skip
    if not status.authenticated:
        raise EnrollmentRefused(f"the token is not valid: {status.error or 'not authenticated'}")
    if audience not in status.audiences:
        raise EnrollmentRefused(f"the token is not for the audience {audience}")
    if status.user.username != account:
        raise EnrollmentRefused(f"{status.user.username} is not the agents' service account {account}")
    nodes = status.user.extra.get(NODE_NAME_KEY) or []
    if len(nodes) != 1 or not nodes[0]:
        raise EnrollmentRefused("the token is not bound to a pod on a node")
    return nodes[0]


def token_reviewer(client: Any, audience: str) -> Callable[[str], dict[str, Any]]:
    """TokenReview through the API server (lightkube client): token -> the review's status as a dict."""
    from lightkube.models.authentication_v1 import TokenReviewSpec
    from lightkube.resources.authentication_v1 import TokenReview

    def review(token: str) -> dict[str, Any]:
        answer = client.create(TokenReview(spec=TokenReviewSpec(token=token, audiences=[audience])))
        return answer.status.to_dict() if answer.status is not None else {}

    return review


def _named(exc: Exception) -> str:
    """An error of the token review's call, as an operator reads it: the API server's own message where it gave one
    (lightkube's ApiError), a connection's, or the kind of failure; never a Python internal (a KeyError's key, an
    AttributeError's object)."""
    if isinstance(exc, OSError | TimeoutError):
        return str(exc) or type(exc).__name__
    status = getattr(exc, "status", None)  # lightkube's ApiError: the API server's Status
    message = getattr(status, "message", None)
    if isinstance(message, str) and message:
        return f"the API server answered: {message}"
    module = type(exc).__module__.split(".")[0]
    if module in ("httpx", "httpcore"):
        return f"cannot reach the API server ({type(exc).__name__})"
    return "the API server's answer is not a TokenReview (unreadable)"


class CertificateService:
    """Issues, counts and keeps this controller's own certificate fresh. `nodes` are the nodes an agent may be
    enrolled for (the controller's pools)."""

    def __init__(
        self,
        config: CertificatesConfig,
        files: tls.TlsFiles,
        own_name: str,
        nodes: set[str],
        review: Callable[[str], dict[str, Any]] | None = None,
    ) -> None:
        self.config, self.files, self.nodes, self.review = config, files, nodes, review
        self.issuer = Issuer(config.issuer)
        names = tuple(dict.fromkeys(config.serve_names))
        self.own = template_for(own_name, (CONTROLLERS,), names) if names else None
        self.issued: Counter[str] = Counter()  # how (renewal, enrollment, own) -> certificates issued
        self._lock = threading.Lock()
        self._recent: defaultdict[str, deque[float]] = defaultdict(deque)  # identity -> when it was issued to

    def _admit(self, identity: str) -> None:
        """At most max_issued_per_identity certificates to one identity within issue_window_s (TooManyRequests)."""
        now, most = time.monotonic(), self.config.max_issued_per_identity
        window = min(self.config.issue_window_s, self.config.issuer.lifetime_s)
        with self._lock:
            recent = self._recent[identity]
            while recent and recent[0] <= now - window:
                recent.popleft()
            if len(recent) >= most:
                retry = recent[0] + window - now
                raise TooManyRequests(f"{identity} was issued {most} certificates in the last {window:g} s "
                                      f"(max_issued_per_identity): ask again in {retry:.0f} s", retry)  # fmt: skip
            recent.append(now)
            if len(self._recent) > 100_000:  # (bounded: the identities whose windows have passed go first)
                for name in [n for n, times in self._recent.items() if not times or times[-1] <= now - window]:
                    del self._recent[name]

    def _issue(self, how: str, csr: str, template: Template) -> dict[str, Any]:
        self._admit(template.common_name)
        chain = self.issuer.issue(csr, template)
        with self._lock:
            self.issued[how] += 1
        log.info("certificate issued to %s (%s)", template.common_name, how)
        return {"certificate": chain}

    def renew(self, presented_der: bytes, csr: str) -> dict[str, Any]:
        """For a caller the TLS handshake verified: its own identity again, with the request's new key."""
        return self._issue("renewal", csr, template_of(presented_der))

    def enroll(self, token: str, csr: str) -> dict[str, Any]:
        """For an agent pod by its token: an agent certificate for the node the API server says the pod is on."""
        if self.config.enrollment is None or self.review is None:
            raise EnrollmentRefused("this controller enrolls no one (certificates.enrollment is not set)")
        enrollment = self.config.enrollment
        try:
            review = self.review(token)
        except Exception as exc:  # the API server away or answering garbage: the agent tries again
            raise ConnectionError(f"the token review failed: {_named(exc)}") from None
        node = enrolled_node(review, enrollment.audience, enrollment.agent_service_account)
        if node not in self.nodes:
            raise EnrollmentRefused(f"{node} is in none of this controller's pools")
        return self._issue("enrollment", csr, template_for(node, (tls.AGENTS,)))

    def keep_own(self, now: dt.datetime | None = None) -> bool:
        """Issue this controller's serving certificate when it is missing or past two thirds of its life; whether
        it did."""
        if self.own is None or not renewal_due(self.files.cert_file, now or dt.datetime.now(dt.UTC)):
            return False
        self.issuer.issue_files(self.own, self.files.cert_file, self.files.key_file)
        with self._lock:
            self.issued["own"] += 1
        return True

    def run(self, stop: threading.Event) -> None:
        """Renew the own certificate in time, checking ten times per lifetime (at most once a minute)."""
        every = min(60.0, self.config.issuer.lifetime_s / 10)
        while not stop.wait(every):
            try:
                if self.keep_own():
                    log.info("renewed this controller's serving certificate %s", self.files.cert_file)
            except (OSError, ValueError) as exc:
                log.warning("cannot renew this controller's certificate: %s", exc)
