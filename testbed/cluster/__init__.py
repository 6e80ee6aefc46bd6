"""A generic, faithful fake Kubernetes cluster: storage, admission and the REST API.

``resources`` names the served types, ``store`` holds objects with kube-apiserver's write,
watch and garbage-collection semantics, ``cluster.FakeCluster`` is the front door (admission
through the apiserver emulator, then the store) and serves the real REST paths over HTTP.
"""
