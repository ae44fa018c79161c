//! `?` in a handler: every kind of error converts into a retryable `HandlerError` whose
//! message is the error and its source chain, keeping the error itself.
#![allow(clippy::expect_used, clippy::unwrap_used)] // test code

use std::fmt;

use backstop_core::{ErrorAction, HandlerError};

#[derive(Debug)]
struct Outer(std::io::Error);

impl fmt::Display for Outer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("charging the card failed")
    }
}

impl std::error::Error for Outer {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

fn handler_std() -> Result<(), HandlerError> {
    Err(Outer(std::io::Error::other("connection reset")))?;
    Ok(())
}

fn handler_boxed() -> Result<(), HandlerError> {
    let e: Box<dyn std::error::Error + Send + Sync> =
        Box::new(Outer(std::io::Error::other("timeout")));
    Err(e)?;
    Ok(())
}

fn handler_anyhow() -> Result<(), HandlerError> {
    use anyhow::Context;
    let r: anyhow::Result<()> =
        Err(std::io::Error::other("503 from the mail server")).context("sending the receipt");
    r?;
    Ok(())
}

fn handler_str() -> Result<(), HandlerError> {
    Err("the order has no lines")?;
    Ok(())
}

#[test]
fn every_error_converts_with_its_source_chain() {
    let e = handler_std().unwrap_err();
    assert_eq!(e.action(), ErrorAction::Retry);
    assert_eq!(e.message(), "charging the card failed: connection reset");
    let cause = e.cause().expect("the error is kept");
    assert!(cause.downcast_ref::<Outer>().is_some());
    assert_eq!(
        cause.source().map(|s| s.to_string()).as_deref(),
        Some("connection reset")
    );

    let e = handler_boxed().unwrap_err();
    assert_eq!(e.message(), "charging the card failed: timeout");
    assert!(e.cause().and_then(|c| c.downcast_ref::<Outer>()).is_some());

    let e = handler_anyhow().unwrap_err();
    assert_eq!(e.message(), "sending the receipt: 503 from the mail server");
    assert!(e.cause().is_some());

    let e = handler_str().unwrap_err();
    assert_eq!(
        (e.action(), e.message()),
        (ErrorAction::Retry, "the order has no lines")
    );

    let e = HandlerError::from(Outer(std::io::Error::other("card stolen"))).permanent();
    assert_eq!(e.action(), ErrorAction::Fail);
    assert_eq!(e.message(), "charging the card failed: card stolen");
    assert!(HandlerError::retry("plain").cause().is_none());
}
