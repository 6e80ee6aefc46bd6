"""The fake cluster that tests and benchmarks run autowrap against (not part of the package).

``cluster`` is the fake Kubernetes API (store, admission, REST), ``apiserver`` the admission
chain as kube-apiserver runs it, ``admission_policy`` its ValidatingAdmissionPolicies, ``sim``
the simulated controllers (kube-scheduler, kubelet, Volcano, Kueue, the AppWrapper operator),
``schemas`` the upstream CRD schemas, ``pki`` and ``policies`` what a served autowrap needs.
Imported from the repository root by ``tests/`` and ``bench/``; the wheel ships ``webhook``
only.
"""
