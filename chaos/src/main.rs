//! backstop's chaos suite: worker processes run the engine against a real database while
//! a driver enqueues business rows and tasks in transactions and injects faults —
//! `kill -9`, `SIGSTOP` past the lease, graceful stops, database restarts, killed
//! connections, and a TCP proxy that delays, stalls and resets the workers' traffic. The
//! workers relay some tasks to a Redis stream that consumer processes apply through the
//! database inbox; consumers are killed and Redis is restarted too.
//! At the end it checks the invariants against the rows and the workers' ledgers and
//! prints each with its counts; any violation makes it exit non-zero.
//!
//! ```sh
//! scripts/chaos                      # the full lane on every backend (starts the servers)
//! scripts/chaos --lane smoke         # the CI lane: every fault once, about 2 minutes
//! backstop-chaos run --backends sqlite --lane smoke --seed 7   # with servers of your own
//! ```
//!
//! The server backends read `BACKSTOP_TEST_POSTGRES_URL` / `BACKSTOP_TEST_MYSQL_URL`
//! and a command that restarts the server at once, `BACKSTOP_TEST_POSTGRES_RESTART` /
//! `BACKSTOP_TEST_MYSQL_RESTART`; the Galera lane reads `BACKSTOP_TEST_GALERA_URL` and
//! `BACKSTOP_TEST_GALERA_DIR` (its nodes' sockets and restart scripts):
//! `scripts/servers.sh` sets them all.

mod check;
mod consumer;
mod driver;
mod galera;
mod ledger;
mod limit;
mod produce;
mod proxy;
mod rate;
mod redis_server;
mod saga;
mod worker;

use std::process::ExitCode;

use driver::{Backend, FaultKind, Lane};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const USAGE: &str =
    "usage: backstop-chaos run [--lane smoke|full] [--backends sqlite,postgres,mysql,galera] [--seed N]
                           [--faults kind,…]   (kill--9 stop graceful-stop db-restart connection-kill
                                                latency stall reset outage consumer-kill redis-restart
                                                node-kill node-cut)
                           [--broken-barrier]  (the sagas' barrier without its unique key: must fail)
       backstop-chaos worker <store url> <ledger file> <redis url> <stream> <orders table>
                             <saga effects table> <barrier: real|keyless copy>   (spawned by run)
       backstop-chaos consumer <store url> <redis url> <stream> <effects table>   (spawned by run)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match args.first().map(String::as_str) {
        Some("worker") if args.len() == 8 => {
            let path = std::path::Path::new(&args[2]);
            child(
                "worker",
                runtime.block_on(worker::run(&args[1], path, &args[3..])),
            )
        }
        Some("consumer") if args.len() == 5 => child(
            "consumer",
            runtime.block_on(consumer::run(&args[1], &args[2], &args[3], &args[4])),
        ),
        Some("run") => match parse(&args[1..]) {
            Ok((backends, lane, seed)) => runtime.block_on(run(backends, lane, seed)),
            Err(e) => {
                eprintln!("error: {e}\n{USAGE}");
                ExitCode::from(2)
            }
        },
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

/// A child process's exit.
fn child(role: &str, result: Result<(), BoxError>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{role} {}: {e}", std::process::id());
            ExitCode::FAILURE
        }
    }
}

fn parse(args: &[String]) -> Result<(Vec<Backend>, Lane, u64), String> {
    let mut backends = vec![
        Backend::Sqlite,
        Backend::Postgres,
        Backend::Mysql,
        Backend::Galera,
    ];
    let mut lane = Lane::full();
    let mut seed = ledger::now_ms() as u64;
    let mut only = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or(format!("{a} needs a value"));
        match a.as_str() {
            "--lane" => {
                lane = match value()?.as_str() {
                    "smoke" => Lane::smoke(),
                    "full" => Lane::full(),
                    other => return Err(format!("unknown lane {other}")),
                }
            }
            "--backends" => {
                backends = value()?
                    .split(',')
                    .map(|b| Backend::parse(b).ok_or(format!("unknown backend {b}")))
                    .collect::<Result<_, _>>()?
            }
            "--broken-barrier" => lane.broken_barrier = true,
            "--seed" => seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--faults" => {
                only = value()?
                    .split(',')
                    .map(|f| FaultKind::parse(f).ok_or(format!("unknown fault {f}")))
                    .collect::<Result<Vec<_>, _>>()?;
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    // the lane lives for the whole run
    lane.only = Vec::leak(only);
    Ok((backends, lane, seed))
}

async fn run(backends: Vec<Backend>, lane: Lane, seed: u64) -> ExitCode {
    let mut failed = false;
    let mut summary = Vec::new();
    for backend in backends {
        let began = std::time::Instant::now();
        match driver::run(backend, lane, seed).await {
            Ok(report) => {
                println!("{}", report.render());
                failed |= !report.ok();
                summary.push(format!(
                    "| {} | {} | {} of {} ({:.2}%) | {} | {:.0} s |",
                    backend.name(),
                    if report.ok() { "hold" } else { "VIOLATED" },
                    report.duplicated_tasks.0,
                    report.duplicated_tasks.1,
                    100.0 * report.duplicated_tasks.0 as f64
                        / report.duplicated_tasks.1.max(1) as f64,
                    report
                        .duplicates
                        .iter()
                        .map(|(k, n)| format!("{} {n}", k.name()))
                        .collect::<Vec<_>>()
                        .join(", "),
                    began.elapsed().as_secs_f64()
                ));
            }
            Err(e) => {
                eprintln!("chaos {}: error: {e}", backend.name());
                failed = true;
            }
        }
    }
    println!("| backend | invariants | tasks run twice | explained by | took |");
    println!("|---|---|---|---|---|");
    for s in summary {
        println!("{s}");
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
