//! TLS from the URL: libpq's `sslmode` and `sslrootcert`, through rustls (feature `tls`).
//!
//! | `sslmode` | encrypted | server certificate checked |
//! |---|---|---|
//! | (absent), `disable` | no | – |
//! | `prefer` | if the server offers it | no |
//! | `require` | yes | no (as libpq: unless `sslrootcert` is given, then as `verify-ca`) |
//! | `verify-ca` | yes | signed by the CA |
//! | `verify-full` | yes | signed by the CA, and names the host |
//!
//! The CA is the PEM file `sslrootcert` names, or Mozilla's roots when it is absent.
//! Without `sslmode` a connection is plain: unlike libpq, backstop does not try TLS
//! unless asked.

use std::path::PathBuf;
use std::str::FromStr;

use backstop_core::{Error, Result};
use tokio_postgres::config::SslMode;

/// The URL's TLS settings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct TlsSettings {
    pub mode: Mode,
    pub root_cert: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Mode {
    #[default]
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl TlsSettings {
    /// `url` without the TLS parameters tokio-postgres does not read, and the settings.
    pub fn split(url: &str) -> Result<(tokio_postgres::Config, TlsSettings)> {
        const OP: &str = "open_store";
        let mut settings = TlsSettings::default();
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            match key {
                "sslmode" => {
                    settings.mode = match value {
                        "disable" => Mode::Disable,
                        "allow" | "prefer" => Mode::Prefer,
                        "require" => Mode::Require,
                        "verify-ca" => Mode::VerifyCa,
                        "verify-full" => Mode::VerifyFull,
                        _ => {
                            return Err(Error::config(
                                OP,
                                format!(
                                    "sslmode={value:?}: expected disable, prefer, require, \
                                     verify-ca or verify-full"
                                ),
                            ))
                        }
                    }
                }
                "sslrootcert" => settings.root_cert = Some(PathBuf::from(decode(value))),
                "sslcert" | "sslkey" | "sslpassword" | "sslcrl" => {
                    return Err(Error::config(
                        OP,
                        format!("{key}: client certificates are not supported; use a password"),
                    ))
                }
                _ => kept.push(pair),
            }
        }
        if settings.mode == Mode::Require && settings.root_cert.is_some() {
            settings.mode = Mode::VerifyCa; // libpq: a root certificate makes require check it
        }
        let url = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        let mut config = tokio_postgres::Config::from_str(&url).map_err(|e| {
            Error::config(OP, format!("invalid PostgreSQL URL: {e}")).with_source(e)
        })?;
        config.ssl_mode(match settings.mode {
            Mode::Disable => SslMode::Disable,
            Mode::Prefer => SslMode::Prefer,
            _ => SslMode::Require,
        });
        Ok((config, settings))
    }
}

/// `%2F` and friends in a URL parameter (a file path).
fn decode(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                let (h, l) = (hex(h).unwrap_or(0), hex(l).unwrap_or(0));
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What the store's connections are made with.
#[cfg(feature = "tls")]
pub(crate) type Tls = tokio_postgres_rustls::MakeRustlsConnect;
/// What the store's connections are made with.
#[cfg(not(feature = "tls"))]
pub(crate) type Tls = tokio_postgres::NoTls;

/// The connector for `settings`.
#[cfg(not(feature = "tls"))]
pub(crate) fn connector(settings: &TlsSettings) -> Result<Tls> {
    match settings.mode {
        Mode::Disable | Mode::Prefer => Ok(tokio_postgres::NoTls),
        _ => Err(Error::config(
            "open_store",
            "the URL asks for TLS (sslmode), but backstop-postgres was built without its \
             `tls` feature (backstop's `tls`)",
        )),
    }
}

/// The connector for `settings`.
#[cfg(feature = "tls")]
pub(crate) fn connector(settings: &TlsSettings) -> Result<Tls> {
    use std::sync::Arc;

    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::client::WebPkiServerVerifier;
    use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
    use rustls_pki_types::pem::PemObject;

    const OP: &str = "open_store";

    /// Checks the certificate chain but not the name (`verify-ca`), or nothing but the
    /// handshake's signatures (`prefer`, `require`).
    #[derive(Debug)]
    struct Verifier {
        chain: Option<Arc<WebPkiServerVerifier>>,
        provider: Arc<CryptoProvider>,
    }

    impl ServerCertVerifier for Verifier {
        fn verify_server_cert(
            &self,
            end_entity: &CertificateDer<'_>,
            intermediates: &[CertificateDer<'_>],
            server_name: &ServerName<'_>,
            ocsp: &[u8],
            now: UnixTime,
        ) -> std::result::Result<ServerCertVerified, rustls::Error> {
            let Some(chain) = &self.chain else {
                return Ok(ServerCertVerified::assertion());
            };
            match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName
                    | CertificateError::NotValidForNameContext { .. },
                )) => Ok(ServerCertVerified::assertion()),
                other => other,
            }
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
            verify_tls12_signature(
                message,
                cert,
                dss,
                &self.provider.signature_verification_algorithms,
            )
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
            verify_tls13_signature(
                message,
                cert,
                dss,
                &self.provider.signature_verification_algorithms,
            )
        }

        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.provider
                .signature_verification_algorithms
                .supported_schemes()
        }
    }

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    match &settings.root_cert {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path).map_err(|e| {
                Error::config(
                    OP,
                    format!("sslrootcert {}: cannot read it: {e}", path.display()),
                )
            })?;
            for cert in certs {
                let cert = cert.map_err(|e| {
                    Error::config(
                        OP,
                        format!("sslrootcert {}: not a PEM certificate: {e}", path.display()),
                    )
                })?;
                roots.add(cert).map_err(|e| {
                    Error::config(OP, format!("sslrootcert {}: {e}", path.display()))
                })?;
            }
            if roots.is_empty() {
                return Err(Error::config(
                    OP,
                    format!("sslrootcert {}: no certificate in it", path.display()),
                ));
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::config(OP, format!("TLS: {e}")))?;
    let config = if settings.mode == Mode::VerifyFull {
        builder.with_root_certificates(roots).with_no_client_auth()
    } else {
        let chain = match settings.mode {
            Mode::VerifyCa => Some(
                WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
                    .build()
                    .map_err(|e| Error::config(OP, format!("TLS: {e}")))?,
            ),
            _ => None,
        };
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Verifier { chain, provider }))
            .with_no_client_auth()
    };
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_libpq_parameters_and_leaves_the_others() {
        let (config, s) = TlsSettings::split(
            "postgres://u@h/db?sslmode=verify-full&application_name=x&sslrootcert=%2Ftmp%2Fca.pem",
        )
        .unwrap();
        assert_eq!(s.mode, Mode::VerifyFull);
        assert_eq!(s.root_cert, Some(PathBuf::from("/tmp/ca.pem")));
        assert_eq!(config.get_application_name(), Some("x"));
        assert_eq!(config.get_ssl_mode(), SslMode::Require);
        let (config, s) = TlsSettings::split("postgres://u@h/db").unwrap();
        assert_eq!(
            (s.mode, config.get_ssl_mode()),
            (Mode::Disable, SslMode::Disable)
        );
        // require with a CA checks it, as libpq does
        let (_, s) =
            TlsSettings::split("postgres://u@h/db?sslmode=require&sslrootcert=ca.pem").unwrap();
        assert_eq!(s.mode, Mode::VerifyCa);
        for bad in ["sslmode=always", "sslcert=c.pem"] {
            let e = TlsSettings::split(&format!("postgres://u@h/db?{bad}")).unwrap_err();
            assert_eq!(e.kind(), backstop_core::ErrorKind::Config, "{bad}");
        }
    }
}
