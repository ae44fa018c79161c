//! `backstop sagas`: list and show sagas, and an operator's retry, compensation or
//! resolution of one ([`TaskStore::command_saga`]).

use std::io::Write;

use backstop::{AnyStore, Saga, SagaCommand, SagaFilter, SagaStatus, TaskStore};
use clap::{Args, Subcommand};

use crate::{ops, print_rows, time, Exit, Failure, Outcome};

#[derive(Subcommand, Debug)]
pub(crate) enum SagasCommand {
    /// Sagas matching the filters, by id (page with --after).
    List {
        /// Only sagas of this definition.
        #[arg(long)]
        name: Option<String>,
        /// Only this status: running, compensating, completed, compensated, parked.
        #[arg(long)]
        status: Option<String>,
        /// Only sagas whose row has not changed for this long: 90s, 15m, 2h, 7d.
        #[arg(long)]
        older_than: Option<String>,
        /// Only ids greater than this (the last id of the previous page).
        #[arg(long, default_value_t = 0)]
        after: i64,
        /// At most this many sagas (1 to 1000).
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// One saga: its row, its steps (state and output) and its operators' log.
    Show {
        /// The saga's id.
        id: i64,
    },
    /// A parked saga: reset its failed steps' tasks and go on (running, or compensating).
    Retry(SagaArgs),
    /// A running saga, or one parked on a failed action: compensate its done steps.
    Compensate(SagaArgs),
    /// Declare a saga completed or compensated by hand, after fixing what it left.
    Resolve {
        #[command(flatten)]
        args: SagaArgs,
        /// What it is now: completed or compensated.
        #[arg(long = "as")]
        to: String,
    },
}

#[derive(Args, Debug)]
pub(crate) struct SagaArgs {
    /// The saga's id.
    id: i64,
    #[command(flatten)]
    change: crate::ChangeArgs,
}

pub(crate) async fn run(store: &AnyStore, command: SagasCommand, json: bool) -> Outcome {
    match command {
        SagasCommand::List {
            name,
            status,
            older_than,
            after,
            limit,
        } => {
            let mut f = SagaFilter::default().after_id(after).limit(limit);
            if let Some(n) = name {
                f = f.name(n);
            }
            if let Some(s) = status {
                f = f.status(s.parse::<SagaStatus>()?);
            }
            if let Some(age) = older_than {
                f = f.older_than(ops::parse_age(&age)?);
            }
            let sagas = store.sagas(&f).await?;
            if json {
                let all: Vec<_> = sagas.iter().map(saga_json).collect();
                println!("{}", serde_json::Value::Array(all));
            } else {
                print_sagas(&sagas);
                if sagas.len() == f.limit {
                    if let Some(last) = sagas.last() {
                        eprintln!("(more may follow: --after {})", last.id);
                    }
                }
            }
            Ok(())
        }
        SagasCommand::Show { id } => show(store, id, json).await,
        SagasCommand::Retry(a) => command_saga(store, SagaCommand::Retry, a, json).await,
        SagasCommand::Compensate(a) => command_saga(store, SagaCommand::Compensate, a, json).await,
        SagasCommand::Resolve { args, to } => {
            let status = to.parse::<SagaStatus>()?;
            command_saga(store, SagaCommand::Resolve(status), args, json).await
        }
    }
}

async fn find(store: &AnyStore, id: i64) -> Result<Saga, Failure> {
    store
        .saga_by_id(id)
        .await?
        .ok_or_else(|| Failure(Exit::NotFound, format!("no saga {id}")))
}

async fn show(store: &AnyStore, id: i64, json: bool) -> Outcome {
    let saga = find(store, id).await?;
    let steps = store.saga_steps(id).await?;
    let log = store.saga_log(id).await?;
    let barrier = store.barrier_records(&saga.gid()).await?;
    if json {
        let mut doc = saga_json(&saga);
        doc["steps"] = steps
            .iter()
            .map(|s| {
                serde_json::json!({
                    "step": s.step, "position": s.position, "group": s.group,
                    "state": s.state.as_str(), "output": s.output,
                    "updated_at": s.updated_at.to_rfc3339(),
                })
            })
            .collect();
        doc["log"] = log
            .iter()
            .map(|e| {
                serde_json::json!({
                    "action": e.action, "operator": e.operator, "reason": e.reason,
                    "at": e.at.to_rfc3339(),
                })
            })
            .collect();
        doc["barrier"] = barrier
            .iter()
            .map(|r| {
                serde_json::json!({
                    "branch": r.branch_id, "op": r.op.as_str(), "reason": r.reason.as_str(),
                    "at": r.created_at.to_rfc3339(),
                })
            })
            .collect();
        println!("{doc}");
        return Ok(());
    }
    println!("saga {} ({} {})", saga.id, saga.name, saga.key);
    for (k, v) in [
        ("status", saga.status.to_string()),
        ("group", saga.group.to_string()),
        ("reason", saga.reason.clone().unwrap_or_else(|| "-".into())),
        ("version", saga.version.to_string()),
        ("created at", time(&saga.created_at)),
        ("updated at", time(&saga.updated_at)),
        ("input", saga.input.clone()),
    ] {
        println!("  {k:<12} {v}");
    }
    println!("steps");
    if steps.is_empty() {
        println!("  (none finished yet)");
    }
    for s in &steps {
        println!(
            "  {}  group {}  {:<20} {:<20} {}",
            time(&s.updated_at),
            s.group,
            s.step,
            s.state.as_str(),
            s.output.as_deref().unwrap_or("-")
        );
    }
    println!("barrier");
    if barrier.is_empty() {
        println!("  (no records: its steps' participants use none, or none ran)");
    }
    for r in &barrier {
        let how = if r.reason == r.op {
            String::new()
        } else {
            format!(" (written by its {})", r.reason)
        };
        println!(
            "  {}  {:<20} {}{how}",
            time(&r.created_at),
            r.branch_id,
            r.op
        );
    }
    println!("log");
    if log.is_empty() {
        println!("  (no operator changes)");
    }
    for e in &log {
        println!(
            "  {}  {:<10}  {}  {}",
            time(&e.at),
            e.action,
            e.operator,
            e.reason
        );
    }
    Ok(())
}

async fn command_saga(store: &AnyStore, command: SagaCommand, a: SagaArgs, json: bool) -> Outcome {
    let audit = a.change.audit()?;
    let saga = find(store, a.id).await?;
    let what = match command {
        SagaCommand::Resolve(to) => format!("resolve saga {} as {to}", saga.id),
        other => format!("{} saga {}", other.as_str(), saga.id),
    };
    if a.change.dry_run {
        if json {
            println!(
                "{}",
                serde_json::json!({"action": command.as_str(), "dry_run": true, "saga": saga_json(&saga)})
            );
        } else {
            println!("dry run: would {what}, now {}:", saga.status);
            print_sagas(std::slice::from_ref(&saga));
        }
        return Ok(());
    }
    if !a.change.yes {
        crate::confirm(
            &what,
            &format!("{what}, now {}", saga.status),
            |out| print_sagas_to(out, std::slice::from_ref(&saga)),
            "nothing was changed",
        )?;
    }
    let after = store.command_saga(a.id, command, &audit).await?;
    if json {
        println!(
            "{}",
            serde_json::json!({"action": command.as_str(), "dry_run": false, "saga": saga_json(&after)})
        );
    } else {
        println!("done: {what}; it is {}", after.status);
        print_sagas(std::slice::from_ref(&after));
    }
    Ok(())
}

fn saga_json(s: &Saga) -> serde_json::Value {
    serde_json::json!({
        "id": s.id, "name": s.name, "key": s.key, "status": s.status.as_str(),
        "group": s.group, "input": s.input, "reason": s.reason, "version": s.version,
        "created_at": s.created_at.to_rfc3339(), "updated_at": s.updated_at.to_rfc3339(),
    })
}

fn print_sagas(sagas: &[Saga]) {
    print_sagas_to(&mut std::io::stdout(), sagas);
}

fn print_sagas_to(out: &mut dyn Write, sagas: &[Saga]) {
    if sagas.is_empty() {
        let _ = writeln!(out, "(no sagas)");
        return;
    }
    let mut rows = vec![
        ["ID", "NAME", "KEY", "STATUS", "GROUP", "UPDATED", "REASON"]
            .map(String::from)
            .to_vec(),
    ];
    for s in sagas {
        rows.push(vec![
            s.id.to_string(),
            s.name.clone(),
            s.key.clone(),
            s.status.to_string(),
            s.group.to_string(),
            time(&s.updated_at),
            crate::one_line(s.reason.as_deref().unwrap_or("")),
        ]);
    }
    print_rows(out, &rows);
}
