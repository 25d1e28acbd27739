"""The HTTPS server over a recording: the JSON API (``/api/v1``) and the dashboard page.

Secure by default: TLS 1.3 only, a token on every route, a Host allow-list
against DNS rebinding, a strict Content-Security-Policy, and no asset from
outside the package. Read-only: the recording is opened by the same guarded
readers as ``explain`` and ``query``.
"""
