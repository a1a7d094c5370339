//! Reading nodes for `inspect` and `doctor`, one file per backend.

pub(crate) mod etcd;
