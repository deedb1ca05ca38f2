//! Nothing here: the package exists for `tests/no_tls.rs`, which sees etcd-ha built without
//! its default features (no TLS).
