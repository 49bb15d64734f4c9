"""TLS for the listeners of both frontends."""

from __future__ import annotations

import ssl


def server_ssl_context(certfile: str, keyfile: str, ca_certfile: str = "") -> ssl.SSLContext:
    """TLS for a listener; with ``ca_certfile`` clients must present a certificate it signed.
    Raises OSError (ssl.SSLError included) when a file cannot be read or used."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certfile, keyfile)
    if ca_certfile:
        context.load_verify_locations(ca_certfile)
        context.verify_mode = ssl.CERT_REQUIRED
    return context
