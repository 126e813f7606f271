"""HTTP for every service, in parts:

- :mod:`.problems`: the ProblemError tree and its problem+json answers;
- :mod:`.lean`: LeanRoute (an endpoint called with the request alone), json_body, the
  document helpers, and the checks that refuse a lean route declaring anything;
- :mod:`.hot`: the hot lane, serving the hottest lean routes ahead of the stack;
- :mod:`.edge`: what every request passes first (request id, body limit, error answer and log,
  metrics, access line);
- :mod:`.metrics`: Prometheus metrics, per app and over worker processes;
- :mod:`.runtime`: process start (the heap freeze, uvicorn as every service runs);
- :mod:`.allowlist`: the clients' networks a service's paths accept (403 for the rest);
- :mod:`.app`: ``create_app``, the factory every service uses;
- :mod:`.client`: AiohttpTransport, the transport under a hot httpx client (imported from
  there, not here: aiohttp is about 7 MB a process, and most services make no such call).

Import from here: the names below are the package's interface.
"""

from hiwallet.core.http.allowlist import ClientAllowlist, ClientNetworks
from hiwallet.core.http.app import Lifespan, ReadyCheck, create_app
from hiwallet.core.http.edge import REQUEST_ID_HEADER
from hiwallet.core.http.lean import (
    FastJSONResponse,
    LeanRoute,
    LeanRouteError,
    Model,
    check_lean_routes,
    document_models,
    json_body,
    json_body_openapi,
    query_params,
)
from hiwallet.core.http.metrics import MULTIPROC_ENV, multiprocess_metrics
from hiwallet.core.http.problems import (
    MALFORMED_BODY_ANSWER,
    PROBLEM_BASE,
    PROBLEM_CONTENT_TYPE,
    PROBLEM_REFUSALS,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    ProblemError,
    ServiceUnavailable,
    TooManyRequests,
    Unauthorized,
    internal_error_response,
    problem_refusal,
    problem_response,
    problem_type,
)
from hiwallet.core.http.runtime import GC_YOUNG_THRESHOLD, serve, settle_heap, settle_heap_once_started

__all__ = [
    "GC_YOUNG_THRESHOLD",
    "MALFORMED_BODY_ANSWER",
    "MULTIPROC_ENV",
    "PROBLEM_BASE",
    "PROBLEM_CONTENT_TYPE",
    "PROBLEM_REFUSALS",
    "REQUEST_ID_HEADER",
    "ClientAllowlist",
    "ClientNetworks",
    "FastJSONResponse",
    "Forbidden",
    "LeanRoute",
    "LeanRouteError",
    "Lifespan",
    "Model",
    "NotFound",
    "PayloadTooLarge",
    "ProblemError",
    "ReadyCheck",
    "ServiceUnavailable",
    "TooManyRequests",
    "Unauthorized",
    "check_lean_routes",
    "create_app",
    "document_models",
    "internal_error_response",
    "json_body",
    "json_body_openapi",
    "multiprocess_metrics",
    "problem_refusal",
    "problem_response",
    "problem_type",
    "query_params",
    "serve",
    "settle_heap",
    "settle_heap_once_started",
]
