//! `backstop tasks edit`: an operator's edit of a pending or waiting task
//! ([`TaskStore::edit`]): run it now, reschedule it, replace its payload; shown and
//! asked first (or `--dry-run`, `--yes`), audited.

use backstop::{AnyStore, Due, TaskEdit, TaskStore};
use chrono::{DateTime, Utc};
use clap::Args;

use crate::{confirm, ops, print_tasks, print_tasks_to, Exit, Failure, Outcome};

#[derive(Args, Debug)]
pub(crate) struct EditArgs {
    /// The task id.
    id: i64,
    /// Due now.
    #[arg(long, conflicts_with_all = ["run_in", "run_at"])]
    run_now: bool,
    /// Due this long from now: 90s, 15m, 2h, 7d.
    #[arg(long, conflicts_with = "run_at")]
    run_in: Option<String>,
    /// Due at this time (RFC 3339: 2026-12-24T09:00:00Z); a past time is now.
    #[arg(long)]
    run_at: Option<String>,
    /// Its new payload, a JSON document.
    #[arg(long, conflicts_with = "payload_file")]
    payload: Option<String>,
    /// Its new payload, read from this file.
    #[arg(long)]
    payload_file: Option<std::path::PathBuf>,
    #[command(flatten)]
    change: crate::ChangeArgs,
}

impl EditArgs {
    fn to_edit(&self) -> Result<TaskEdit, Failure> {
        let mut edit = TaskEdit::default();
        if self.run_now {
            edit = edit.due(Due::Now);
        }
        if let Some(d) = &self.run_in {
            edit = edit.due(Due::In(ops::parse_age(d)?));
        }
        if let Some(t) = &self.run_at {
            let at = DateTime::parse_from_rfc3339(t).map_err(|e| {
                Failure(Exit::Usage, format!("--run-at {t:?} is not RFC 3339: {e}"))
            })?;
            edit = edit.due(Due::At(at.with_timezone(&Utc)));
        }
        if let Some(p) = &self.payload {
            edit = edit.payload(p.clone());
        }
        if let Some(path) = &self.payload_file {
            let p = std::fs::read_to_string(path).map_err(|e| {
                Failure(Exit::Usage, format!("cannot read {}: {e}", path.display()))
            })?;
            edit = edit.payload(p);
        }
        if edit.due.is_none() && edit.payload.is_none() {
            return Err(Failure(
                Exit::Usage,
                "nothing to edit: give --run-now, --run-in, --run-at, --payload or --payload-file"
                    .into(),
            ));
        }
        Ok(edit)
    }
}

fn describe(edit: &TaskEdit) -> String {
    let due = match edit.due {
        Some(Due::Now) => Some("due now".to_owned()),
        Some(Due::In(d)) => Some(format!("due in {}", crate::human(d))),
        Some(Due::At(t)) => Some(format!("due at {}", t.to_rfc3339())),
        _ => None,
    };
    let payload = edit
        .payload
        .as_ref()
        .map(|p| format!("payload replaced ({} bytes)", p.len()));
    [due, payload]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) async fn run(store: &AnyStore, a: EditArgs, json: bool) -> Outcome {
    let edit = a.to_edit()?;
    let audit = a.change.audit()?;
    let task = store
        .get(a.id)
        .await?
        .ok_or_else(|| Failure(Exit::NotFound, format!("no task {}", a.id)))?;
    let what = format!("{} task {}: {}", edit.action(), a.id, describe(&edit));
    if a.change.dry_run {
        if json {
            println!(
                "{}",
                serde_json::json!({"action": edit.action(), "dry_run": true, "task": ops::task_json(&task, &task.payload)})
            );
        } else {
            println!("dry run: would {what}");
            print_tasks(std::slice::from_ref(&task));
        }
        return Ok(());
    }
    if !a.change.yes {
        confirm(
            &format!("{} task {}", edit.action(), a.id),
            &what,
            |out| print_tasks_to(out, std::slice::from_ref(&task)),
            "nothing was changed",
        )?;
    }
    let after = store.edit(a.id, &edit, &audit).await?;
    if json {
        println!(
            "{}",
            serde_json::json!({"action": edit.action(), "dry_run": false, "task": ops::task_json(&after, &after.payload)})
        );
    } else {
        println!("done: {what}");
        print_tasks(std::slice::from_ref(&after));
    }
    Ok(())
}
