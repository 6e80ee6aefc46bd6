"""The imperative shell: the HTTPS server, the Kubernetes client and its watch caches,
certificates, metrics and policy files. Everything here does I/O; the engine beside it
(``webhook/core/`` and ``webhook/model/``) does none; nothing here imports the controller or the
command line.
"""
