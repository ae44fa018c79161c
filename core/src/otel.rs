//! A task's trace context: the W3C `traceparent` of the span that made it, stored with
//! the task, so the attempt's span (and a relayed message's consumer) can link back to
//! the request that enqueued it, across processes and retries.
//!
//! With the feature `otel`, [`NewTask::new`](crate::NewTask::new) captures the current
//! `tracing` span's OpenTelemetry context (through `tracing-opentelemetry`), and the
//! engine's `backstop.task` span of every attempt links to it. Without the feature a
//! trace context is stored only when set ([`NewTask::traceparent`](crate::NewTask::traceparent)),
//! and nothing links.
//!
//! The relay of `backstop-redis` forwards the context as the stream entry's
//! `traceparent` header ([`HEADER`]), and its consumer's span of each message links to
//! it.

/// The header a relayed message carries the task's trace context in (W3C's name).
pub const HEADER: &str = "traceparent";

/// Whether `tp` is a W3C `traceparent` backstop stores: version `00`, a 32-hex-digit
/// trace id and a 16-hex-digit parent id, neither all zeros, and 2 hex digits of flags
/// (lowercase, 55 bytes).
///
/// ```
/// use backstop_core::is_traceparent;
/// assert!(is_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
/// assert!(!is_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01"));
/// assert!(!is_traceparent("not a trace"));
/// ```
pub fn is_traceparent(tp: &str) -> bool {
    parts(tp).is_some()
}

/// The trace id, the parent (span) id and the flags of a valid `traceparent`.
fn parts(tp: &str) -> Option<(&str, &str, &str)> {
    let mut it = tp.split('-');
    let (version, trace, span, flags) = (it.next()?, it.next()?, it.next()?, it.next()?);
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let zero = |s: &str| s.bytes().all(|b| b == b'0');
    let ok = it.next().is_none()
        && version == "00"
        && hex(trace, 32)
        && hex(span, 16)
        && hex(flags, 2)
        && !zero(trace)
        && !zero(span);
    ok.then_some((trace, span, flags))
}

/// The current span's trace context as a `traceparent`, when the application's
/// subscriber has an OpenTelemetry layer and the span is sampled or recorded; `None`
/// otherwise (and always without the feature `otel`).
pub fn current() -> Option<String> {
    #[cfg(feature = "otel")]
    {
        use opentelemetry::trace::TraceContextExt;
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        let cx = tracing::Span::current().context();
        let span = cx.span();
        let sc = span.span_context();
        if sc.is_valid() {
            return Some(format!(
                "00-{}-{}-{:02x}",
                sc.trace_id(),
                sc.span_id(),
                sc.trace_flags().to_u8()
            ));
        }
    }
    None
}

/// Link `span` to the span whose context `traceparent` holds (nothing when it is `None`
/// or invalid, and always without the feature `otel`): what the engine does for each
/// attempt, and the relay's consumer for each message.
pub fn link(span: &tracing::Span, traceparent: Option<&str>) {
    #[cfg(feature = "otel")]
    if let Some((trace, parent, flags)) = traceparent.and_then(parts) {
        use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        let (Ok(trace), Ok(parent), Ok(flags)) = (
            TraceId::from_hex(trace),
            SpanId::from_hex(parent),
            u8::from_str_radix(flags, 16),
        ) else {
            return;
        };
        let cx = SpanContext::new(
            trace,
            parent,
            TraceFlags::new(flags),
            true,
            TraceState::default(),
        );
        span.add_link(cx);
    }
    #[cfg(not(feature = "otel"))]
    let _ = (span, traceparent);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_are_checked_whole() {
        let good = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert!(is_traceparent(good));
        for bad in [
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
            "",
        ] {
            assert!(!is_traceparent(bad), "{bad}");
        }
        assert_eq!(current(), None, "no OpenTelemetry layer: no context");
    }
}
