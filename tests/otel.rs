//! OpenTelemetry (feature `otel`): a task made inside a span carries that span's W3C trace
//! context, stored with it, and the engine's span of the attempt links to it; a task made
//! outside any span carries none and its attempt's span links to nothing. Relayed to a
//! Redis stream, the context travels as the entry's `traceparent` header and the
//! consumer's span of the message links to it. Real parts: a tracer with an in-memory
//! exporter under a `tracing` subscriber (this test binary's global one), engines on
//! SQLite, Redis.
#![allow(clippy::expect_used, clippy::unwrap_used)] // test code

use std::time::Duration;

use backstop::redis::{ConsumerOptions, RelayOptions, StreamConsumer, StreamRelay};
use backstop::sqlite::{sqlite_handler, SqliteStore};
use backstop::{
    handler_fn, Engine, EngineConfig, HandlerOptions, NewTask, Status, Task, TaskStore,
};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_attempts_span_links_to_the_span_that_enqueued_the_task() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("backstop-test")));
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let store = SqliteStore::open_in_memory().await.unwrap();
    store.migrate().await.unwrap();
    let engine = Engine::builder(store.clone())
        .config(
            EngineConfig::default()
                .poll_interval(Duration::from_millis(50))
                .first_poll_delay(Duration::ZERO),
        )
        .handler(
            "MAIL",
            handler_fn(|_t: Task| async { Ok(()) }),
            HandlerOptions::default(),
        )
        .start()
        .unwrap();

    // a task made inside the request's span, and one made outside any span
    let request = tracing::info_span!("request");
    let task = request.in_scope(|| NewTask::new("MAIL", "traced"));
    let request_cx = request.context();
    let request_sc = request_cx.span().span_context().clone();
    assert!(request_sc.is_valid());
    let expected = format!(
        "00-{}-{}-{:02x}",
        request_sc.trace_id(),
        request_sc.span_id(),
        request_sc.trace_flags().to_u8()
    );
    assert_eq!(task.trace_context(), Some(expected.as_str()));
    let traced = store.enqueue(task).await.unwrap().id;
    let plain = store
        .enqueue(NewTask::new("MAIL", "plain"))
        .await
        .unwrap()
        .id;
    drop(request);
    assert_eq!(
        store.get(traced).await.unwrap().unwrap().traceparent,
        Some(expected),
        "stored with the task"
    );
    assert_eq!(store.get(plain).await.unwrap().unwrap().traceparent, None);

    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    for id in [traced, plain] {
        while store.get(id).await.unwrap().unwrap().status != Status::Succeeded {
            assert!(
                std::time::Instant::now() < deadline,
                "task {id} did not run"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    engine.shutdown().await;
    provider.force_flush().unwrap();

    let spans = exporter.get_finished_spans().unwrap();
    let attempt = |key: &str| {
        spans
            .iter()
            .find(|s| {
                s.name == "backstop.task"
                    && s.attributes
                        .iter()
                        .any(|kv| kv.key.as_str() == "biz_key" && kv.value.as_str() == key)
            })
            .unwrap_or_else(|| panic!("no attempt span of {key}: {spans:?}"))
    };
    let links = &attempt("traced").links.links;
    assert_eq!(links.len(), 1, "{links:?}");
    assert_eq!(links[0].span_context.trace_id(), request_sc.trace_id());
    assert_eq!(links[0].span_context.span_id(), request_sc.span_id());
    assert!(
        attempt("plain").links.links.is_empty(),
        "no context, no link"
    );
    // the request's span itself was exported under the same trace
    assert!(spans
        .iter()
        .any(|s| s.name == "request" && s.span_context.trace_id() == request_sc.trace_id()));

    relayed_context_reaches_the_consumer(&provider, &exporter).await;
}

/// A task enqueued in the span `checkout`, relayed to a stream by an engine: the entry's
/// `traceparent` header is the task's context, and the consumer's `backstop.consume`
/// span of it links to `checkout`.
async fn relayed_context_reaches_the_consumer(
    provider: &SdkTracerProvider,
    exporter: &InMemorySpanExporter,
) {
    let redis = match backstop_testkit::server_url("BACKSTOP_TEST_REDIS_URL") {
        Ok(url) => url,
        Err(why) => {
            assert!(
                !backstop_testkit::required("redis"),
                "redis is required: {why:?}"
            );
            eprintln!("SKIPPED the relay's trace context: {why:?}");
            return;
        }
    };
    let stream = backstop_testkit::unique_name("otel");
    let orders = SqliteStore::open_in_memory().await.unwrap();
    orders.migrate().await.unwrap();
    let relay = StreamRelay::open(&redis, RelayOptions::new(&stream)).unwrap();
    let engine = Engine::builder(orders.clone())
        .config(
            EngineConfig::default()
                .poll_interval(Duration::from_millis(50))
                .first_poll_delay(Duration::ZERO),
        )
        .handler("ORDER", relay, HandlerOptions::default())
        .start()
        .unwrap();
    let checkout = tracing::info_span!("checkout");
    let task = checkout.in_scope(|| NewTask::new("ORDER", "o-1"));
    let checkout_sc = checkout.context().span().span_context().clone();
    orders.enqueue(task).await.unwrap();
    drop(checkout);

    let payments = SqliteStore::open_in_memory().await.unwrap();
    payments.migrate().await.unwrap();
    let consumer = StreamConsumer::start(
        &redis,
        payments,
        sqlite_handler(|_tx, message| {
            assert!(
                message.headers.iter().any(|(k, _)| k == "traceparent"),
                "{message:?}"
            );
            Ok(())
        }),
        ConsumerOptions::new(&stream, "payments").block(Duration::from_millis(100)),
    )
    .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while consumer.counters().processed < 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "not consumed: {:?}",
            consumer.counters()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    consumer.shutdown().await;
    engine.shutdown().await;
    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let consumed = spans
        .iter()
        .find(|s| {
            s.name == "backstop.consume"
                && s.attributes
                    .iter()
                    .any(|kv| kv.key.as_str() == "biz_key" && kv.value.as_str() == "o-1")
        })
        .unwrap_or_else(|| panic!("no consumer span: {spans:?}"));
    let links = &consumed.links.links;
    assert_eq!(links.len(), 1, "{links:?}");
    assert_eq!(
        (
            links[0].span_context.trace_id(),
            links[0].span_context.span_id()
        ),
        (checkout_sc.trace_id(), checkout_sc.span_id())
    );
}
