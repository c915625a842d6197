"""A local control plane (etcd, kube-apiserver, kwok) for trying and testing: Go builds, PKI, processes."""
