"""The imperative shell: the HTTPS server, the Kubernetes client and its watch caches,
certificates, metrics and policy files. Everything here does I/O; the engine beside it
(``webhook/`` top level, ``kinds/``, ``plumbing/``, ``rules/``) does none.
"""
