//! The TLS options of the etcd client, from the checked TLS settings.

use etcd_client::{Certificate, Identity, TlsOptions};

use crate::tls::TlsMaterial;

/// The CA to trust (the public roots when none is given) and the certificate to present.
pub(super) fn options(tls: &TlsMaterial) -> TlsOptions {
    let mut options = TlsOptions::new();
    options = match &tls.ca {
        Some(ca) => options.ca_certificate(Certificate::from_pem(ca)),
        None => options.with_webpki_roots(),
    };
    if let Some((cert, key)) = &tls.identity {
        options = options.identity(Identity::from_pem(cert, key));
    }
    options
}
