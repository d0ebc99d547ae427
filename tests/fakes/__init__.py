"""Fakes that speak the real protocols over loopback HTTP (kube-apiserver, Nuclio dashboard, S3), for tests and demos."""
