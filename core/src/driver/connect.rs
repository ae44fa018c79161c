//! Why a store's first connection failed: one wording and kind per cause, on every
//! backend.

use crate::error::{Error, ErrorKind};

/// Why a store's first connection failed, as its driver read the error: the one
/// wording and [`ErrorKind`] of each cause on every backend. A refused connection and a
/// connect timeout are temporary; an unknown host, refused credentials and a missing
/// database are configuration errors (retrying cannot help).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectFailure {
    /// Nothing accepted the connection at that address.
    Refused,
    /// The connect did not complete in time.
    TimedOut,
    /// The host name does not resolve.
    UnknownHost,
    /// The server refused the user or password.
    AccessDenied,
    /// The database named in the URL does not exist.
    UnknownDatabase,
    /// TLS failed: the server's certificate is not trusted (wrong CA, wrong host name),
    /// the server does not offer TLS, or it requires TLS the URL did not ask for.
    Tls,
}

impl ConnectFailure {
    /// The error of `open_store`: `backend` (as users name it), `server` (host, port and
    /// user; never the password), the cause, then `detail` (the driver's own words).
    ///
    /// ```
    /// use backstop_core::driver::ConnectFailure;
    /// use backstop_core::ErrorKind;
    /// let e = ConnectFailure::Refused.error("MySQL", "127.0.0.1:1 as user \"app\"", "os error 111");
    /// assert_eq!(e.kind(), ErrorKind::Unavailable);
    /// assert!(e.to_string().contains("cannot connect to MySQL at 127.0.0.1:1"));
    /// ```
    pub fn error(self, backend: &str, server: &str, detail: impl std::fmt::Display) -> Error {
        let (kind, why) = match self {
            ConnectFailure::Refused => (
                ErrorKind::Unavailable,
                "connection refused (is the server running, on that port?)",
            ),
            ConnectFailure::TimedOut => (ErrorKind::Unavailable, "connect timed out"),
            ConnectFailure::UnknownHost => (
                ErrorKind::Config,
                "unknown host (check the URL's host name)",
            ),
            ConnectFailure::AccessDenied => (
                ErrorKind::Config,
                "access denied (check the URL's user and password)",
            ),
            ConnectFailure::UnknownDatabase => (
                ErrorKind::Config,
                "unknown database (create it, or check the URL's path)",
            ),
            ConnectFailure::Tls => (
                ErrorKind::Config,
                "TLS failed (is the URL's CA the one that signed the server's certificate, \
                 for this host name? does the server offer TLS, or require it?)",
            ),
        };
        Error::new(
            kind,
            "open_store",
            format!("cannot connect to {backend} at {server}: {why}: {detail}"),
        )
    }

    /// [`Tls`](Self::Tls) when a driver's words for a failed connect are about TLS: a
    /// certificate refused in the handshake, a server without TLS, or one that refuses
    /// an unencrypted connection ("no encryption", PostgreSQL's `pg_hba.conf`).
    ///
    /// ```
    /// use backstop_core::driver::ConnectFailure;
    /// assert_eq!(ConnectFailure::of_tls("invalid peer certificate: UnknownIssuer"), Some(ConnectFailure::Tls));
    /// assert_eq!(ConnectFailure::of_tls("Connection refused"), None);
    /// ```
    pub fn of_tls(words: &str) -> Option<ConnectFailure> {
        ["certificate", "TLS", "SSL", "no encryption"]
            .iter()
            .any(|w| words.contains(w))
            .then_some(ConnectFailure::Tls)
    }

    /// The cause of a failed connect's I/O error, if it is one of these.
    pub fn of_io(e: &std::io::Error) -> Option<ConnectFailure> {
        match e.kind() {
            std::io::ErrorKind::ConnectionRefused => Some(ConnectFailure::Refused),
            std::io::ErrorKind::TimedOut => Some(ConnectFailure::TimedOut),
            // the resolver's "failed to lookup address information"
            _ if e.to_string().contains("lookup") => Some(ConnectFailure::UnknownHost),
            _ => None,
        }
    }
}
