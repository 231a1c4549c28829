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
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import Field

from ha_ops.security import tls
from ha_ops.security.issuer import Issuer, IssuerFiles, Template, template_for, template_of
from ha_ops.security.pki import CONTROLLERS, renewal_due
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


class EnrollmentRefused(Exception):
    """A token that enrolls nobody (403, naming why)."""


def enrolled_node(review: Mapping[str, Any], audience: str, account: str) -> str:
    """The node a TokenReview's status (as the API returns it) vouches for, or EnrollmentRefused naming why not."""
    if not review.get("authenticated"):
        raise EnrollmentRefused(f"the token is not valid: {review.get('error') or 'not authenticated'}")
    if audience not in (review.get("audiences") or []):
        raise EnrollmentRefused(f"the token is not for the audience {audience}")
    user = review.get("user") or {}
    if user.get("username") != account:
        raise EnrollmentRefused(f"{user.get('username')} is not the agents' service account {account}")
    nodes = (user.get("extra") or {}).get(NODE_NAME_KEY) or []
    if len(nodes) != 1 or not nodes[0]:
        raise EnrollmentRefused("the token is not bound to a pod on a node")
    return str(nodes[0])


def token_reviewer(client: Any, audience: str) -> Callable[[str], dict[str, Any]]:
    """TokenReview through the API server (lightkube client): token -> the review's status as a dict."""
    from lightkube.models.authentication_v1 import TokenReviewSpec
    from lightkube.resources.authentication_v1 import TokenReview

    def review(token: str) -> dict[str, Any]:
        answer = client.create(TokenReview(spec=TokenReviewSpec(token=token, audiences=[audience])))
        return answer.status.to_dict() if answer.status is not None else {}

    return review


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

    def _issue(self, how: str, csr: str, template: Template) -> dict[str, Any]:
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
        except Exception as exc:  # the API server away: the agent tries again
            raise ConnectionError(f"the token review failed: {exc}") from None
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
