"""Every API error is JSON with a stable ``code`` and a human ``detail``."""

import functools
import io
import json
import logging
import re
from urllib.parse import parse_qsl, unquote_plus

from django.conf import settings
from django.core.handlers.wsgi import LimitedStream
from django.http import HttpResponse, JsonResponse
from django.shortcuts import render
from rest_framework import exceptions, status
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.parsers import JSONParser
from rest_framework.response import Response

from stateboard.canonical import jsonb_float

logger = logging.getLogger(__name__)


class DomainError(Exception):
    """A refused operation; services raise it, the API renders it."""

    status_code = 409

    def __init__(self, code: str, detail: str, *, status_code: int | None = None, **extra):
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.extra = extra
        if status_code is not None:
            self.status_code = status_code

    def as_dict(self) -> dict:
        return {"code": self.code, "detail": self.detail, **self.extra}


class Conflict(DomainError):
    status_code = 409


class Invalid(DomainError):
    status_code = 422


class NotFound(DomainError):
    status_code = 404


class Forbidden(DomainError):
    status_code = 403


class Refused(Forbidden):
    """An authorizer's no: ``Refused(code, detail)`` (403). Raised by ``ledger/authorizers.py`` and
    ``knowledge/authorizers.py``; the pipeline (``stateboard.policy``) records and answers it."""


class ParseFailed(exceptions.ParseError):
    def __init__(self, code: str, detail: str):
        super().__init__(detail=detail, code=code)
        self.stable_code = code


_SURROGATE = re.compile("[\ud800-\udfff]")  # half of a pair, alone: no UTF-8, no jsonb text
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")  # the only way one gets into a UTF-8 body


def _scan(value) -> tuple[int, bool, bool]:
    """Nesting depth of a decoded JSON value, and whether any string (keys too) holds a NUL, or a lone
    surrogate (iterative)."""
    deepest, has_nul, has_surrogate = 0, False, False
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        strings = ()
        if isinstance(item, dict):
            deepest = max(deepest, depth)
            strings = item.keys()
            stack.extend((child, depth + 1) for child in item.values())
        elif isinstance(item, list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in item)
        elif isinstance(item, str):
            strings = (item,)
        for text in strings:
            has_nul = has_nul or "\x00" in text
            has_surrogate = has_surrogate or _SURROGATE.search(text) is not None
    return deepest, has_nul, has_surrogate


def decode_json_body(raw: bytes):
    """Decode a request body, refusing NUL bytes, deep nesting and bad JSON with stable codes."""
    if b"\x00" in raw:
        raise ParseFailed("nul_byte", "The body contains a NUL byte; it is refused, never sanitised.")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ParseFailed("malformed_json", "The body is not valid UTF-8.")
    try:
        value = _decoder().decode(text)
    except RecursionError:
        raise ParseFailed("too_deep", f"JSON nesting deeper than {settings.API_MAX_DEPTH} levels.")
    except ValueError as exc:
        raise ParseFailed("malformed_json", f"Malformed JSON: {exc}")
    # A body can nest no deeper than it has brackets, and a string can hold a NUL or a lone surrogate only
    # through a \u escape (raw NUL bytes were refused above, raw surrogates are no UTF-8): most bodies
    # need no walk at all.
    if (raw.count(b"{") + raw.count(b"[") > settings.API_MAX_DEPTH or b"\\u0000" in raw
            or _SURROGATE_ESCAPE.search(raw)):
        depth, has_nul, has_surrogate = _scan(value)
        if depth > settings.API_MAX_DEPTH:
            raise ParseFailed("too_deep", f"JSON nesting deeper than {settings.API_MAX_DEPTH} levels.")
        if has_nul:
            raise ParseFailed("nul_byte", "A string holds a NUL character (\\u0000); it is refused, never sanitised.")
        if has_surrogate:
            raise ParseFailed("malformed_json", "A string holds half of a surrogate pair (\\ud800-\\udfff) "
                                                "alone: it is not Unicode text.")
    return value


def _jsonb_float(text: str):
    """Numbers with a fraction or exponent, as jsonb will store them (``canonical.jsonb_float``; 1e999 is
    refused there, as a ValueError the parser passes on)."""
    return jsonb_float(float(text))


def _refuse_constant(name):
    raise ValueError(f"{name} is not a JSON number")


@functools.cache
def _decoder() -> json.JSONDecoder:
    """What ``json.loads(text, parse_constant=..., parse_float=...)`` makes at every call, made once."""
    return json.JSONDecoder(parse_constant=_refuse_constant, parse_float=_jsonb_float)


class StrictJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        raw = stream.read() if stream is not None else b""
        if not raw:
            return {}
        return decode_json_body(raw)


class JSONFirstNegotiation(DefaultContentNegotiation):
    """DRF's content negotiation, answered at once for what agents send (no ``Accept``, ``*/*``, or the
    first renderer's own media type, with no ``?format=``): the first renderer, as DRF would choose it.
    Anything else is negotiated by DRF as before (an unmet ``Accept`` still answers 406)."""

    def select_renderer(self, request, renderers, format_suffix=None):
        first = renderers[0] if renderers else None
        if first is not None and not format_suffix and accepts_at_once(request.META, first.media_type):
            return first, first.media_type
        return super().select_renderer(request, renderers, format_suffix)


def accepts_at_once(meta, media_type: str) -> bool:
    """Whether a request takes ``media_type`` without negotiating: no query string (no ``?format=``) and
    an ``Accept`` that is absent, ``*/*`` or exactly that type."""
    return not meta.get("QUERY_STRING") and meta.get("HTTP_ACCEPT", "*/*") in ("*/*", media_type)


class BodySizeLimitMiddleware:
    """The request's framing, checked before anything reads it (SPEC §11.3): a body over the limit is 413
    ``body_too_large`` (a chunked one too, read up to the limit), a body shorter than its Content-Length
    is 400 ``body_incomplete`` and never executed, a NUL in the query string is 400 ``invalid_filter``
    and one in the path 404."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        limit = settings.API_MAX_BODY_BYTES
        if "\x00" in request.path:
            return error_response("not_found", "Not found.", 404)
        query = request.META.get("QUERY_STRING", "")
        if "\x00" in unquote_plus(query):
            fields = sorted({name.replace("\x00", "") for name, value in parse_qsl(query, keep_blank_values=True)
                             if "\x00" in name or "\x00" in value}) or ["query"]
            return error_response("invalid_filter", "A query parameter holds a NUL character.", 400,
                                  errors={name: ["holds a NUL character"] for name in fields})
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return error_response("bad_request", "Invalid Content-Length header.", 400)
        if length > limit:
            return error_response("body_too_large", f"Request body exceeds {limit} bytes.", 413, limit=limit)
        chunked = "chunked" in request.META.get("HTTP_TRANSFER_ENCODING", "").lower()
        if chunked and not request.META.get("CONTENT_LENGTH") and "wsgi.input" in request.META:
            body = request.META["wsgi.input"].read(limit + 1)
            if len(body) > limit:
                return error_response("body_too_large", f"Request body exceeds {limit} bytes.", 413, limit=limit)
            request.META["CONTENT_LENGTH"] = str(len(body))
            request._stream = LimitedStream(io.BytesIO(body), len(body))
        elif length:
            try:
                complete = len(request.body) == length
            except OSError:  # the client went away mid-body
                complete = False
            if not complete:
                return error_response("body_incomplete", "The body is shorter than its Content-Length.", 400)
        return self.get_response(request)


def error_response(code: str, detail: str, status_code: int, **extra) -> JsonResponse:
    return JsonResponse({"code": code, "detail": detail, **extra}, status=status_code)


_DRF_CODES = {
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.AuthenticationFailed: "authentication_failed",
    exceptions.PermissionDenied: "permission_denied",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.Throttled: "throttled",
    exceptions.ParseError: "malformed_json",
    exceptions.ValidationError: "validation_error",
}


def api_exception_handler(exc, context):
    if isinstance(exc, DomainError):
        return Response(exc.as_dict(), status=exc.status_code)
    if isinstance(exc, ParseFailed):
        return Response({"code": exc.stable_code, "detail": str(exc.detail)}, status=400)
    from rest_framework.views import exception_handler  # late: DRF's settings import this module's users

    response = exception_handler(exc, context)
    if response is None:
        return None
    code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), "error")
    if isinstance(exc, exceptions.ValidationError):
        response.data = {"code": code, "detail": "Invalid input.", "errors": response.data}
        response.status_code = status.HTTP_400_BAD_REQUEST
    else:
        detail = response.data.get("detail", "") if isinstance(response.data, dict) else response.data
        response.data = {"code": code, "detail": str(detail)}
    return response


def _wants_json(request) -> bool:
    return request.path.startswith("/api/") or "application/json" in request.headers.get("Accept", "")


def _error_page(request, status_code: int, title: str, detail: str):
    """A styled page that keeps the menu; if even that fails (a 500 in the layout), plain text."""
    try:
        return render(request, "error.html", {"status": status_code, "title": title, "detail": detail},
                      status=status_code)
    except Exception:  # noqa: BLE001 — the error page must not raise
        logger.exception("error page failed")
        return HttpResponse(f"{status_code} {title}", status=status_code, content_type="text/plain; charset=utf-8")


def handler400(request, exception=None):
    if _wants_json(request):
        return error_response("bad_request", "Bad request.", 400)
    return _error_page(request, 400, "Bad request", "The request could not be understood.")


def handler403(request, exception=None):
    if _wants_json(request):
        return error_response("permission_denied", "You do not have permission to do this.", 403)
    return _error_page(request, 403, "Not allowed", "Your role does not allow this page or action.")


def handler404(request, exception=None):
    if _wants_json(request):
        return error_response("not_found", f"No such URL: {request.path}", 404)
    return _error_page(request, 404, "Not found", f"Nothing lives at {request.path}.")


def handler500(request):
    if _wants_json(request):
        return error_response("server_error", "Internal server error; it has been logged.", 500)
    return _error_page(request, 500, "Server error", "Something broke on our side; it has been logged.")
