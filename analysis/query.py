"""The query-string check shared by every dashboard page (:mod:`analysis.urls`) and the report
resources of the API (:mod:`api.reports`): a parameter name or value holding a control character
(U+0000..U+001F or U+007F) is refused before anything is read. No stored name, key, criterion or
setting holds one, and PostgreSQL refuses NUL in a string, so such a value would otherwise reach
the database and answer 500."""
from functools import wraps

from django.http import HttpResponseBadRequest
from django.utils.html import escape


def has_control_character(text: str) -> bool:
    """True when ``text`` holds a control character (code point below 0x20, or 0x7F)."""
    return any(ord(c) < 0x20 or ord(c) == 0x7F for c in text)


def control_character_parameter(query) -> str | None:
    """The first parameter of ``query`` (a QueryDict, e.g. ``request.GET``) whose name or any
    value holds a control character, None when there is none. The name is returned with its
    non-ASCII and control characters backslash-escaped (``"q\\x00"``), ready to be shown on a page."""
    for name, values in query.lists():
        if has_control_character(name) or any(has_control_character(v) for v in values):
            return name.encode("unicode_escape").decode("ascii")
    return None


def bad_request(message: str) -> HttpResponseBadRequest:
    """HTTP 400 with a one-line HTML ``message`` (escaped) in ``<p id='problem'>``, the answer of
    every dashboard page to a bad setting."""
    return HttpResponseBadRequest(f"<h1>Bad request</h1><p id='problem'>{escape(message)}</p>")


def refuse_control_characters(view):
    """Wrap the page ``view``: a request whose query string has a control character in a parameter
    name or value (:func:`control_character_parameter`) is answered 400 naming the parameter, and
    ``view`` is not called."""

    @wraps(view)
    def checked(request, *args, **kwargs):
        name = control_character_parameter(request.GET)
        if name is not None:
            return bad_request(f"the query parameter {name} holds a control character, which no setting may hold")
        return view(request, *args, **kwargs)

    checked.refuses_control_characters = True
    return checked
