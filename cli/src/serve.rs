//! `backstop serve`: the web console standalone, with `/metrics`.

use backstop::console::{Console, Metrics, TokenAuth};
use backstop::AnyStore;
use clap::Args;

use crate::{Exit, Failure, Outcome};

/// Where to serve.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The address to listen on (port 0: any free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
    /// Serve no /metrics.
    #[arg(long)]
    no_metrics: bool,
}

pub async fn run(store: AnyStore, args: ServeArgs) -> Outcome {
    let auth = TokenAuth::from_env()?;
    if auth.is_empty() {
        return Err(Failure(
            Exit::Usage,
            "no token: set BACKSTOP_CONSOLE_TOKEN (admin; at least 16 characters) or \
             BACKSTOP_CONSOLE_READ_TOKEN (read-only); the console lets nobody in without one"
                .into(),
        ));
    }
    let mut console = Console::new(store).authorizer(auth);
    if !args.no_metrics {
        console = console.metrics(Metrics::install()?, true);
    }
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .map_err(|e| {
            Failure(
                Exit::Usage,
                format!("cannot listen on {}: {e}", args.listen),
            )
        })?;
    let addr = listener
        .local_addr()
        .map_err(|e| Failure(Exit::Failed, e.to_string()))?;
    println!("console on http://{addr}/ (sign in with the token; Ctrl-C stops)");
    axum::serve(listener, console.router())
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| Failure(Exit::Failed, format!("the console stopped: {e}")))
}
