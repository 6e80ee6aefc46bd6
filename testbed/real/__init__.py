"""A real control plane for the suite's top tier: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, KWOK, Kueue, the AppWrapper controller and Volcano, each built from its Go module
(``build``) and started on loopback for one test session (``launcher``)."""
