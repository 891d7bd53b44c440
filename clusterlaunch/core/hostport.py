"""HOST:PORT as every message writes it: an IPv6 address in brackets.

``fd42:6::10:2222`` is itself a valid IPv6 address, so a port after an
unbracketed IPv6 address cannot be told from the address; ``[fd42:6::10]:2222``
is how ssh's ``-W``, URLs and ssh's own known_hosts write it. One helper for
the controller's messages and the remote programs' (the preflight's "cannot
connect to ..."): bundled into them (``remote/__init__.py``), so it stays
stdlib-only, Python >= 3.8, without ``from __future__``.
"""


def host_port(host: str, port: object) -> str:
    """``host:port``, or ``[host]:port`` where ``host`` holds a ``:`` (an IPv6 address,
    zone included: ``[fe80::1%eth0]:22``). ``port`` may be a word (``AUTO``)."""
    if ":" in host:
        return f"[{host}]:{port}"
    return f"{host}:{port}"
