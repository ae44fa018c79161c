//! `backstop`: the operator's command line.
//!
//! ```text
//! backstop --url URL stats
//! backstop --url URL tasks list --status failed
//! backstop --url URL tasks show 42
//! backstop --url URL tasks reset --event-type SEND_EMAIL --status failed
//! backstop --url URL sagas list --status parked
//! backstop --url URL sagas retry 7 --reason "the payment service is back"
//! backstop --url URL queues pause SEND_EMAIL --reason "the mail provider is down"
//! backstop --url URL queues list
//! backstop --url URL migrate
//! backstop --url URL schema
//! BACKSTOP_CONSOLE_TOKEN=… backstop --url URL serve --listen 127.0.0.1:8080
//! backstop --url mysql://… --notify-redis redis://127.0.0.1/ --notify-channel backstop:orders tasks cancel 42
//! ```
//!
//! Exit codes (stable, for scripts): see [`Exit`].

use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use backstop::console::ops::{self, Action, Target};
use backstop::{
    AnyStore, Audit, ErrorKind, Stats, Status, StoreConfig, Task, TaskFilter, TaskStore,
};
use clap::{Args, Parser, Subcommand};

mod edit;
mod queues;
mod sagas;
mod serve;

/// The operator's command line of backstop: see what is stuck and why, reset, cancel or
/// delete tasks, retry, compensate or resolve sagas, pause or resume queues, print counts
/// and the schema, run the web console.
///
/// Exit codes: 0 done; 1 the database failed (connect, query); 2 bad usage or input;
/// 3 no such task or saga; 4 its state does not allow the action; 5 declined at the
/// confirmation prompt.
#[derive(Parser, Debug)]
#[command(name = "backstop", version)]
struct Cli {
    /// The database: sqlite:path/app.db, postgres://user:pass@host/db, mysql://user:pass@host/db.
    #[arg(long, env = "BACKSTOP_URL", global = true, hide_env_values = true)]
    url: Option<String>,
    /// The task table.
    #[arg(
        long,
        env = "BACKSTOP_TABLE",
        global = true,
        default_value = "backstop_task"
    )]
    table: String,
    /// Redis that engines listen to for wake-ups (MySQL, SQLite):
    /// redis://[user:pass@]host[:port][/db]. With it, a cancel or reset of a running task
    /// reaches its handler at once instead of at its engine's next heartbeat. A
    /// PostgreSQL store announces with NOTIFY and needs none.
    #[arg(
        long,
        env = "BACKSTOP_NOTIFY_REDIS",
        global = true,
        hide_env_values = true,
        requires = "notify_channel"
    )]
    notify_redis: Option<String>,
    /// The engines' Redis pub/sub channel (as given to their RedisNotifier).
    #[arg(long, env = "BACKSTOP_NOTIFY_CHANNEL", global = true)]
    notify_channel: Option<String>,
    /// Print JSON instead of a table (one document on stdout).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
#[allow(clippy::large_enum_variant)] // parsed once per run
enum Command {
    /// Counts per event type and status, and the age of the oldest due pending task.
    Stats {
        /// Count succeeded tasks too (scans every retained row; the default counts the
        /// backlog only, through the status indexes).
        #[arg(long)]
        all: bool,
    },
    /// List, show, reset, cancel, delete or edit tasks.
    #[command(subcommand)]
    Tasks(TasksCommand),
    /// List and show sagas; retry, compensate or resolve one.
    #[command(subcommand)]
    Sagas(sagas::SagasCommand),
    /// List queues (event types: paused or running, their limits and backlog); pause,
    /// resume or limit one (concurrency, rate, per partition key).
    #[command(subcommand)]
    Queues(queues::QueuesCommand),
    /// Create the task, inbox and audit tables and their indexes (idempotent).
    Migrate,
    /// Print the DDL `migrate` runs for the URL's backend (nothing is connected).
    Schema,
    /// Run the web console (and /metrics) standalone. The admin token is read from
    /// BACKSTOP_CONSOLE_TOKEN (audited as BACKSTOP_CONSOLE_OPERATOR, default console), a
    /// read-only token from BACKSTOP_CONSOLE_READ_TOKEN; it refuses to start without one.
    Serve(serve::ServeArgs),
}

#[derive(Subcommand, Debug)]
enum TasksCommand {
    /// Tasks matching the filters, in id order (page with --after).
    List {
        #[command(flatten)]
        filter: FilterArgs,
        /// Only ids greater than this (the last id of the previous page).
        #[arg(long)]
        after: Option<i64>,
    },
    /// One task: payload, last error, attempts, owner, lease and its audit history.
    Show {
        /// The task id.
        id: i64,
    },
    /// Failed or cancelled tasks back to pending (attempts 0, due now).
    Reset(ActionArgs),
    /// Pending or running tasks to cancelled: never run again (a running handler is not
    /// interrupted; its outcome is refused).
    Cancel(ActionArgs),
    /// Remove tasks that are not running (the audit entry stays).
    Delete(ActionArgs),
    /// A pending or waiting task: run it now, reschedule it, or replace its payload.
    Edit(edit::EditArgs),
}

#[derive(Args, Debug, Clone)]
struct FilterArgs {
    /// Only this status: pending, running, succeeded, failed, cancelled.
    #[arg(long)]
    status: Option<String>,
    /// Only this event type.
    #[arg(long)]
    event_type: Option<String>,
    /// Only this business key.
    #[arg(long)]
    key: Option<String>,
    /// Only business keys starting with this text (exact: a saga's step tasks are
    /// `<saga key>/…`).
    #[arg(long)]
    key_prefix: Option<String>,
    /// Only tasks whose last error contains this text (exact, case sensitive).
    #[arg(long)]
    error: Option<String>,
    /// Only tasks not updated for this long: 90s, 15m, 2h, 7d.
    #[arg(long)]
    older_than: Option<String>,
    /// Only tasks with this tag (repeat for several: all must match).
    #[arg(long = "tag", value_name = "TAG")]
    tags: Vec<String>,
    /// Only tasks whose metadata has KEY with the string VALUE (repeat: all must match).
    #[arg(long = "meta", value_name = "KEY=VALUE")]
    meta: Vec<String>,
    /// At most this many tasks (1 to 1000).
    #[arg(long, default_value_t = 100)]
    limit: usize,
}

#[derive(Args, Debug)]
struct ActionArgs {
    /// The task id; or leave it out and select tasks with the filters.
    id: Option<i64>,
    #[command(flatten)]
    filter: FilterArgs,
    #[command(flatten)]
    change: ChangeArgs,
}

/// What every change takes: a dry run or a confirmation, and who and why for its log.
#[derive(Args, Debug, Clone)]
pub(crate) struct ChangeArgs {
    /// Show what would change; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Do not ask for confirmation (needed when stdin is not a terminal).
    #[arg(long, short = 'y')]
    yes: bool,
    /// Who does it, for the log (default: $BACKSTOP_OPERATOR, then $USER).
    #[arg(long)]
    operator: Option<String>,
    /// Why, for the log.
    #[arg(long, default_value = "")]
    reason: String,
}

impl ChangeArgs {
    /// The audit of the change, checked (`InvalidInput` before anything is listed or
    /// asked).
    fn audit(&self) -> Result<Audit, Failure> {
        let audit = Audit::new(operator(self.operator.clone()), self.reason.clone());
        audit.validate()?;
        Ok(audit)
    }
}

/// The exit codes, stable for scripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Exit {
    /// The database failed (connect, query) or something unexpected happened.
    Failed = 1,
    /// Bad usage or input (clap's usage errors exit with 2 too).
    Usage = 2,
    /// No such task or saga.
    NotFound = 3,
    /// The task's or saga's state does not allow the action.
    Conflict = 4,
    /// Declined at the confirmation prompt.
    Declined = 5,
}

/// A failure to report: the message, and the exit code.
struct Failure(Exit, String);

impl From<backstop::Error> for Failure {
    fn from(e: backstop::Error) -> Self {
        let code = match e.kind() {
            ErrorKind::InvalidInput | ErrorKind::Config => Exit::Usage,
            ErrorKind::NotFound => Exit::NotFound,
            ErrorKind::Conflict => Exit::Conflict,
            _ => Exit::Failed,
        };
        let mut message = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            message.push_str(&format!("\n  caused by: {s}"));
            source = s.source();
        }
        if e.is_temporary() {
            message.push_str("\n  (temporary: retrying may help)");
        }
        let lower = message.to_lowercase();
        if ["no such table", "does not exist", "doesn't exist"]
            .iter()
            .any(|m| lower.contains(m))
        {
            message
                .push_str("\n  (has `backstop migrate` run on this database, with this --table?)");
        }
        Failure(code, message)
    }
}

type Outcome = Result<(), Failure>;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(Exit::Failed as u8);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(code, message)) => {
            eprintln!("error: {message}");
            ExitCode::from(code as u8)
        }
    }
}

async fn run(cli: Cli) -> Outcome {
    let url = cli.url.clone().ok_or_else(|| {
        Failure(
            Exit::Usage,
            "no database: pass --url URL or set BACKSTOP_URL (sqlite:app.db, postgres://…, mysql://…)"
                .into(),
        )
    })?;
    let mut config = StoreConfig::default().table(cli.table.clone());
    if let (Some(redis), Some(channel)) = (&cli.notify_redis, &cli.notify_channel) {
        let notifier = backstop::redis::RedisNotifier::open(redis, channel.clone())
            .map_err(|e| Failure(Exit::Usage, format!("--notify-redis: {e}")))?;
        config = config.notifier(std::sync::Arc::new(notifier));
    }
    if let Command::Schema = cli.command {
        print!("{}", backstop::ddl(&url, &config)?);
        return Ok(());
    }
    if !matches!(cli.command, Command::Migrate) {
        if let Some(path) = sqlite_file(&url) {
            if !std::path::Path::new(path).exists() {
                return Err(Failure(
                    Exit::Usage,
                    format!("no database file at {path} (`backstop migrate` creates one)"),
                ));
            }
        }
    }
    let store = backstop::connect_with(&url, config).await?;
    match cli.command {
        Command::Schema => Ok(()),
        Command::Migrate => {
            store.migrate().await?;
            if cli.json {
                println!("{}", serde_json::json!({ "migrated": true }));
            } else {
                println!(
                    "migrated to schema version {1}: tables {0}, {0}_inbox, {0}_audit, \
                     {0}_keys, {0}_handlers, {0}_barrier, {0}_saga, {0}_saga_step, \
                     {0}_saga_audit, {0}_queues, {0}_queue_audit and {0}_rate are in place \
                     (versions in {0}_migrations)",
                    cli.table,
                    backstop::driver::schema::LATEST
                );
            }
            Ok(())
        }
        Command::Serve(args) => serve::run(store, args).await,
        Command::Stats { all } => {
            let stats = if all {
                store.stats().await?
            } else {
                store.backlog().await?
            };
            print_stats(&stats, all, cli.json);
            Ok(())
        }
        Command::Tasks(TasksCommand::List { filter, after }) => {
            let mut f = filter.to_filter()?;
            f.after_id = after;
            let tasks = store.list(&f).await?;
            if cli.json {
                let all: Vec<_> = tasks
                    .iter()
                    .map(|t| ops::task_json(t, &t.payload))
                    .collect();
                println!("{}", serde_json::Value::Array(all));
            } else {
                print_tasks(&tasks);
                if tasks.len() == f.limit {
                    if let Some(last) = tasks.last() {
                        eprintln!("(more may follow: --after {})", last.id);
                    }
                }
            }
            Ok(())
        }
        Command::Tasks(TasksCommand::Show { id }) => show(&store, id, cli.json).await,
        Command::Tasks(TasksCommand::Reset(a)) => act(&store, Action::Reset, a, cli.json).await,
        Command::Tasks(TasksCommand::Cancel(a)) => act(&store, Action::Cancel, a, cli.json).await,
        Command::Tasks(TasksCommand::Delete(a)) => act(&store, Action::Delete, a, cli.json).await,
        Command::Tasks(TasksCommand::Edit(a)) => edit::run(&store, a, cli.json).await,
        Command::Sagas(command) => sagas::run(&store, command, cli.json).await,
        Command::Queues(command) => queues::run(&store, command, cli.json).await,
    }
}

impl FilterArgs {
    fn to_filter(&self) -> Result<TaskFilter, Failure> {
        let mut f = TaskFilter::default().limit(self.limit);
        if let Some(s) = &self.status {
            f = f.status(s.parse::<Status>()?);
        }
        if let Some(t) = &self.event_type {
            f = f.event_type(t.clone());
        }
        if let Some(k) = &self.key {
            f = f.biz_key(k.clone());
        }
        if let Some(k) = &self.key_prefix {
            f = f.biz_key_prefix(k.clone());
        }
        if let Some(e) = &self.error {
            f = f.error_contains(e.clone());
        }
        if let Some(age) = &self.older_than {
            f = f.older_than(ops::parse_age(age)?);
        }
        for tag in &self.tags {
            f = f.tag(tag.clone());
        }
        for pair in &self.meta {
            let (key, value) = pair.split_once('=').ok_or_else(|| {
                Failure(
                    Exit::Usage,
                    format!(
                        "--meta {pair:?}: write KEY=VALUE (a metadata key and its string value)"
                    ),
                )
            })?;
            f = f.metadata(key, value);
        }
        Ok(f)
    }
}

async fn show(store: &AnyStore, id: i64, json: bool) -> Outcome {
    let task = store
        .get(id)
        .await?
        .ok_or_else(|| Failure(Exit::NotFound, format!("no task {id}")))?;
    let history = store.audit_log(id).await?;
    if json {
        let mut doc = ops::task_json(&task, &task.payload);
        doc["history"] = history.iter().map(ops::audit_json).collect();
        println!("{doc}");
        return Ok(());
    }
    let retry = &task.retry;
    let rows = [
        ("event type", task.event_type.clone()),
        ("key", task.biz_key.clone()),
        ("status", task.status.to_string()),
        (
            "attempts",
            format!(
                "{} of {} ({} backoff, {} up to {})",
                task.attempts,
                retry.max_attempts,
                retry.backoff.strategy().to_lowercase(),
                human(retry.backoff.interval()),
                human(retry.backoff.max_interval())
            ),
        ),
        ("next run at", time(&task.next_run_at)),
        ("owner", task.owner.clone().unwrap_or_else(|| "-".into())),
        ("lease", task.lease.to_string()),
        ("created at", time(&task.created_at)),
        ("updated at", time(&task.updated_at)),
        (
            "last error",
            task.last_error.clone().unwrap_or_else(|| "-".into()),
        ),
        ("tags", non_empty(task.tags.join(", "))),
        (
            "metadata",
            task.metadata.clone().unwrap_or_else(|| "-".into()),
        ),
        (
            "trace",
            task.traceparent.clone().unwrap_or_else(|| "-".into()),
        ),
        (
            "partition",
            task.partition.clone().unwrap_or_else(|| "-".into()),
        ),
    ];
    println!("task {}", task.id);
    for (k, v) in rows {
        println!("  {k:<12} {}", v.replace('\n', "\n               "));
    }
    println!("payload");
    let pretty = pretty_json(&task.payload);
    for line in pretty.lines() {
        println!("  {line}");
    }
    if let Some(output) = &task.output {
        println!("output");
        for line in pretty_json(output).lines() {
            println!("  {line}");
        }
    }
    println!("history");
    if history.is_empty() {
        println!("  (no operator changes)");
    }
    for h in &history {
        println!(
            "  {}  {:<6}  {}  {}",
            time(&h.at),
            h.action,
            h.operator,
            h.reason
        );
    }
    Ok(())
}

async fn act(store: &AnyStore, action: Action, a: ActionArgs, json: bool) -> Outcome {
    let target = match a.id {
        Some(id) => {
            if a.filter.status.is_some()
                || a.filter.event_type.is_some()
                || a.filter.key.is_some()
                || a.filter.error.is_some()
                || a.filter.older_than.is_some()
            {
                return Err(Failure(
                    Exit::Usage,
                    "give a task id or filters, not both".into(),
                ));
            }
            Target::Id(id)
        }
        None => Target::filter(a.filter.to_filter()?)?,
    };
    let audit = a.change.audit()?;
    let plan = ops::plan(store, action, &target).await?;
    let matching = ops::matching(store, action, &target).await?;
    // "50 task(s)", or "50 of 1234 matching task(s)" when the limit leaves some out
    let count = match matching > plan.len() as u64 {
        true => format!("{} of {matching} matching task(s)", plan.len()),
        false => format!("{} task(s)", plan.len()),
    };
    let verb = action.verb();
    if a.change.dry_run {
        if json {
            print_action_json(action, true, &plan, &[]);
        } else if plan.is_empty() {
            println!("dry run: no task to {verb}");
        } else {
            println!("dry run: would {verb} {count}:");
            print_tasks(&plan);
        }
        return Ok(());
    }
    if plan.is_empty() {
        if json {
            print_action_json(action, false, &[], &[]);
        } else {
            println!("no task to {verb}");
        }
        return Ok(());
    }
    if !a.change.yes {
        confirm(
            &format!("{verb} {} task(s)", plan.len()),
            &format!("{verb} {count}"),
            |out| print_tasks_to(out, &plan),
            &format!("nothing was {}", action.done()),
        )?;
    }
    let applied = ops::apply(store, action, &target, &audit).await?;
    // a reset by filter reports only what it reset: the rest of the plan changed meanwhile
    let mut skipped: Vec<(i64, String)> = applied
        .skipped
        .iter()
        .map(|(id, e)| (*id, e.to_string()))
        .collect();
    if action == Action::Reset && matches!(target, Target::Filter(_)) {
        for t in &plan {
            if !applied.done.iter().any(|d| d.id == t.id) {
                skipped.push((t.id, "changed meanwhile".into()));
            }
        }
    }
    if json {
        print_action_json(action, false, &applied.done, &skipped);
    } else {
        println!("{} {} task(s)", action.done(), applied.done.len());
        print_tasks(&applied.done);
        for (id, why) in &skipped {
            println!("skipped task {id}: {why}");
        }
    }
    Ok(())
}

fn print_action_json(action: Action, dry_run: bool, tasks: &[Task], skipped: &[(i64, String)]) {
    println!(
        "{}",
        serde_json::json!({
            "action": action.verb(),
            "dry_run": dry_run,
            "tasks": tasks.iter().map(|t| ops::task_json(t, &t.payload)).collect::<Vec<_>>(),
            "skipped": skipped.iter().map(|(id, why)| serde_json::json!({"id": id, "reason": why})).collect::<Vec<_>>(),
        })
    );
}

fn print_stats(stats: &Stats, all: bool, json: bool) {
    let shown: Vec<Status> = Status::ALL
        .into_iter()
        .filter(|s| all || *s != Status::Succeeded)
        .collect();
    if json {
        let counts: Vec<_> = stats
            .counts
            .iter()
            .map(|c| serde_json::json!({"event_type": c.event_type, "status": c.status.to_string(), "count": c.count}))
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "counts": counts,
                "oldest_due_pending_seconds": stats.oldest_due_pending.map(|d| d.as_secs_f64()),
                "succeeded_counted": all,
            })
        );
        return;
    }
    let mut types: Vec<&str> = stats.counts.iter().map(|c| c.event_type.as_str()).collect();
    types.dedup();
    let mut header = vec!["EVENT TYPE".to_owned()];
    header.extend(shown.iter().map(|s| s.to_string().to_uppercase()));
    let mut rows = vec![header];
    for t in &types {
        let mut row = vec![(*t).to_owned()];
        row.extend(shown.iter().map(|s| stats.count_for(t, *s).to_string()));
        rows.push(row);
    }
    let mut total = vec!["(all)".to_owned()];
    total.extend(shown.iter().map(|s| stats.count(*s).to_string()));
    rows.push(total);
    print_rows(&mut std::io::stdout(), &rows);
    match stats.oldest_due_pending {
        Some(d) => println!("oldest due pending task: waiting {}", human(d)),
        None => println!("oldest due pending task: none due"),
    }
}

/// `json` indented, or as it is when it does not parse.
fn pretty_json(json: &str) -> String {
    serde_json::from_str::<serde_json::Value>(json)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| json.to_owned())
}

/// `text`, or `-` when empty.
fn non_empty(text: String) -> String {
    if text.is_empty() {
        "-".into()
    } else {
        text
    }
}

fn print_tasks(tasks: &[Task]) {
    print_tasks_to(&mut std::io::stdout(), tasks)
}

fn print_tasks_to(out: &mut dyn Write, tasks: &[Task]) {
    if tasks.is_empty() {
        let _ = writeln!(out, "(no tasks)");
        return;
    }
    let mut rows = vec![[
        "ID",
        "STATUS",
        "EVENT TYPE",
        "KEY",
        "ATTEMPTS",
        "NEXT RUN (UTC)",
        "UPDATED (UTC)",
        "LAST ERROR",
    ]
    .map(str::to_owned)
    .to_vec()];
    for t in tasks {
        rows.push(vec![
            t.id.to_string(),
            t.status.to_string(),
            t.event_type.clone(),
            t.biz_key.clone(),
            format!("{}/{}", t.attempts, t.retry.max_attempts),
            time(&t.next_run_at),
            time(&t.updated_at),
            t.last_error.as_deref().map(one_line).unwrap_or_default(),
        ]);
    }
    print_rows(out, &rows);
}

/// Columns padded to their widest cell (by characters); the last column is not padded.
fn print_rows(out: &mut dyn Write, rows: &[Vec<String>]) {
    let n = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..n)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in rows {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            if i + 1 == r.len() {
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.push_str(&" ".repeat(widths[i] - cell.chars().count() + 2));
            }
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

/// The file of an `sqlite:` URL (none for an in-memory database or another backend).
fn sqlite_file(url: &str) -> Option<&str> {
    let rest = url.strip_prefix("sqlite:")?;
    let path = rest.strip_prefix("//").unwrap_or(rest);
    (!path.is_empty() && path != ":memory:").then_some(path)
}

fn one_line(s: &str) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > 80 {
        let cut: String = flat.chars().take(79).collect();
        format!("{cut}…")
    } else {
        flat
    }
}

fn time(t: &chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S").to_string()
}

fn human(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 1.0 {
        format!("{}ms", d.as_millis())
    } else if s < 120.0 {
        format!("{s:.1}s")
    } else if s < 7200.0 {
        format!("{:.1}m", s / 60.0)
    } else if s < 172_800.0 {
        format!("{:.1}h", s / 3600.0)
    } else {
        format!("{:.1}d", s / 86_400.0)
    }
}

/// Who an operator's change is by: `--operator`, else `$BACKSTOP_OPERATOR`, else
/// `$USER`, else `cli`.
fn operator(given: Option<String>) -> String {
    given
        .or_else(|| std::env::var("BACKSTOP_OPERATOR").ok())
        .or_else(|| std::env::var("USER").ok())
        .filter(|o| !o.is_empty())
        .unwrap_or_else(|| "cli".into())
}

/// Ask at the terminal before a change (`what`: "reset 3 task(s)"; `about`: what the
/// prompt lists, shown by `show`). Refused when stdin is not a terminal (pass --yes);
/// `Declined` unless the answer is yes, `nothing` saying what was not done.
fn confirm(what: &str, about: &str, show: impl FnOnce(&mut dyn Write), nothing: &str) -> Outcome {
    if !std::io::stdin().is_terminal() {
        return Err(Failure(
            Exit::Usage,
            format!(
                "refusing to {what} without confirmation: stdin is not a terminal; pass --yes \
                 (or --dry-run to see what would change)"
            ),
        ));
    }
    eprintln!("about to {about}:");
    let mut err = std::io::stderr();
    show(&mut err);
    eprint!("{}? [y/N] ", capitalize(what));
    let _ = err.flush();
    let mut answer = String::new();
    let _ = std::io::stdin().lock().read_line(&mut answer);
    if !matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes") {
        return Err(Failure(Exit::Declined, format!("not confirmed: {nothing}")));
    }
    Ok(())
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}
