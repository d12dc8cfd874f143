//! The PostgreSQL sink: records become rows of a table, committed in two phases.
//!
//! Each subtask writes into an open transaction. At a checkpoint barrier it runs
//! `PREPARE TRANSACTION` with a global id that names the job, the sink, the subtask and the
//! checkpoint (`weir/<job>/<sink>/<subtask>/<checkpoint>`), records the id in the checkpoint,
//! and begins the next transaction; when the checkpoint completes, the runtime's
//! `COMMIT PREPARED` (on a connection of its own, [`PostgresSinkConfig::commit`]) makes the
//! rows visible, and again before a restore from it (one that is gone was committed before).
//! A restore ends the connections a dead process left (named `weir/<job>/<sink>/<subtask>`)
//! and rolls back the subtask's prepared transactions no checkpoint recorded, whose records
//! come again. A dropped connection fails the task: its open transaction dies with the
//! connection, and the job restarts from its last checkpoint.
//!
//! PostgreSQL refuses `PREPARE TRANSACTION` while `max_prepared_transactions` is 0, its
//! default: set it to at least the number of sink subtasks times the checkpoints that can be
//! pending at once, plus some (e.g. `ALTER SYSTEM SET max_prepared_transactions = 64` and a
//! restart of the server).
//!
//! Rows are written a batch at a time, as one JSON array per statement
//! (`json_populate_recordset`), never a round trip per record. In `append` mode every record
//! becomes a row (its changelog kind optionally in `kind_column`). In `upsert` mode an insert
//! or update-after replaces the row with the same `key` (`INSERT ... ON CONFLICT DO UPDATE`),
//! a delete removes it and an update-before is skipped, as Flink's upsert sinks do.
//!
//! Without checkpointing, or with `delivery = "at_least_once"`, each batch commits on its own:
//! nothing is lost in a crash, and what was written after the last checkpoint is written again.
//! With `delivery = "write_ahead"` (upsert only) each checkpoint interval's changes, collapsed
//! per key, travel in the checkpoint and are written when it completes, again after a crash.

use std::fmt::Write as _;
use std::time::Duration;

use postgres::{Client, NoTls};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use weir_wire::{Kind, RecordRef};

use super::{ConnectorError, Delivery, Sink, SinkContext};
use crate::batch::Batch;

/// `type = "postgres"`: rows of `table` (see the module documentation).
///
/// ```toml
/// [[sink]]
/// name = "counts"
/// type = "postgres"
/// input = "count"
/// connection = "host=127.0.0.1 user=postgres dbname=test"
/// table = "word_counts"
/// mode = "upsert"            # or "append"
/// key = ["word"]             # upsert: the table's primary key or a unique index
/// format = "key_value"       # the record's key and value are the two columns; or "json"
/// columns = ["word", "count"]
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresSinkConfig {
    /// A libpq connection string (`host=... user=... dbname=...`) or a `postgresql://` URL.
    pub connection: String,
    /// The table, optionally with its schema (`schema.table`).
    pub table: String,
    #[serde(default)]
    /// Append every record as a row, or upsert by key.
    pub mode: WriteMode,
    /// Upsert: the columns of the table's primary key or of a unique index.
    #[serde(default)]
    pub key: Vec<String>,
    #[serde(default)]
    /// How a record becomes a row.
    pub format: RowFormat,
    /// The columns written: with `key_value`, the key's column then the value's.
    pub columns: Vec<String>,
    /// Append: a column for the record's changelog kind (`+I`, `-U`, `+U`, `-D`).
    #[serde(default)]
    pub kind_column: Option<String>,
    /// `"at_least_once"`: every batch commits at once, without prepared transactions.
    #[serde(default)]
    pub delivery: Delivery,
}

/// How records change the table.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteMode {
    /// Every record becomes a row.
    #[default]
    Append,
    /// Records replace or delete the row with their key.
    Upsert,
}

/// How a record becomes a row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RowFormat {
    /// The value is a JSON object whose fields name the columns.
    #[default]
    Json,
    /// The key (as text) is the first column, the value (as text) the second.
    KeyValue,
}

/// How long to wait for a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Attempts of a commit after its checkpoint completed, before the job fails.
const COMMIT_ATTEMPTS: u32 = 5;

fn identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `name` as a quoted SQL identifier (the caller checked it).
fn quoted(name: &str) -> String {
    format!("\"{name}\"")
}

impl PostgresSinkConfig {
    pub(super) fn validate(&self) -> Result<(), String> {
        self.connection
            .parse::<postgres::Config>()
            .map_err(|e| format!("connection: {e}"))?;
        if !self.table.split('.').all(identifier) || self.table.split('.').count() > 2 {
            return Err(format!(
                "table \"{}\" is not a plain name: use letters, digits and _ (and schema.table)",
                self.table
            ));
        }
        let named = self
            .columns
            .iter()
            .chain(&self.key)
            .chain(&self.kind_column);
        if let Some(bad) = named.clone().find(|c| !identifier(c)) {
            return Err(format!(
                "column \"{bad}\" is not a plain name: use letters, digits and _"
            ));
        }
        if self.columns.is_empty() {
            return Err("columns is empty: list the columns the sink writes".into());
        }
        if self.format == RowFormat::KeyValue && self.columns.len() != 2 {
            return Err(format!(
                "format = \"key_value\" writes two columns, the key's and the value's, but \
                 columns lists {}",
                self.columns.len()
            ));
        }
        if self.delivery == Delivery::WriteAhead && self.mode != WriteMode::Upsert {
            return Err(
                "delivery = \"write_ahead\" writes a checkpoint's rows again after a crash, \
                 which only upserts make harmless: set mode = \"upsert\""
                    .into(),
            );
        }
        match self.mode {
            WriteMode::Upsert if self.key.is_empty() => Err(
                "mode = \"upsert\" needs key = [...]: the columns of the table's primary key or \
                 of a unique index"
                    .into(),
            ),
            WriteMode::Upsert
                if self.format == RowFormat::KeyValue && self.key != self.columns[..1] =>
            {
                Err(format!(
                    "with format = \"key_value\" the record's key is the row's key: set key = \
                     [\"{}\"]",
                    self.columns[0]
                ))
            }
            WriteMode::Upsert => match self.key.iter().find(|k| !self.columns.contains(k)) {
                Some(k) => Err(format!("key column \"{k}\" is not in columns")),
                None if self.kind_column.is_some() => {
                    Err("kind_column applies to mode = \"append\"".into())
                }
                None => Ok(()),
            },
            WriteMode::Append => Ok(()),
        }
    }

    /// Connects and checks, writing nothing, that the table has the columns the sink writes,
    /// and that the server allows the prepared transactions two-phase commit needs.
    pub(super) fn check(&self, checkpointing: bool) -> Result<(), ConnectorError> {
        let mut client = self.connect("weir/validate")?;
        let statements = Statements::new(self);
        client
            .batch_execute(&format!(
                "SELECT {} FROM {} LIMIT 0",
                statements.columns, statements.table
            ))
            .map_err(|e| pg_error("read the columns it writes", e))?;
        // The write itself, of no rows, rolled back: the right to insert, and an upsert's
        // unique index on its key.
        let mut tx = client
            .transaction()
            .map_err(|e| pg_error("begin a transaction", e))?;
        tx.execute(&statements.insert, &[&"[]"])
            .map_err(|e| pg_error(&format!("write to table {}", self.table), e))?;
        tx.rollback()
            .map_err(|e| pg_error("roll back the check", e))?;
        if checkpointing && self.delivery == Delivery::ExactlyOnce {
            let max: String = client
                .query_one("SHOW max_prepared_transactions", &[])
                .map_err(|e| pg_error("read max_prepared_transactions", e))?
                .get(0);
            if max == "0" {
                return Err(ConnectorError::External {
                    message: "PostgreSQL sink: the server allows no prepared transactions \
                              (max_prepared_transactions = 0), which exactly-once delivery \
                              needs: ALTER SYSTEM SET max_prepared_transactions = 64 and restart \
                              the server, or set delivery = \"at_least_once\""
                        .into(),
                    permanent: true,
                });
            }
        }
        Ok(())
    }

    pub(super) fn build(
        &self,
        ctx: &SinkContext<'_>,
        restore: Option<&serde_json::Value>,
    ) -> Result<PostgresSink, ConnectorError> {
        let names = Names::new(ctx);
        let mut client = self.connect(&names.application)?;
        let transactional = self.delivery.transactional(ctx);
        if transactional {
            // The runtime committed what `restore` records before the restore; check it parses.
            if let Some(state) = restore {
                Handle::parse(state)?;
            }
            end_zombies(&mut client, &names.application)?;
            // What no checkpoint recorded: its records come again.
            for gid in prepared(&mut client, &names.prefix)? {
                tracing::info!(gid, "rolling back a transaction no checkpoint recorded");
                client
                    .batch_execute(&format!("ROLLBACK PREPARED '{gid}'"))
                    .map_err(|e| pg_error("roll back a stray prepared transaction", e))?;
            }
            client
                .batch_execute("BEGIN")
                .map_err(|e| pg_error("begin a transaction", e))?;
        }
        Ok(PostgresSink {
            statements: Statements::new(self),
            config: self.clone(),
            client,
            names,
            transactional,
            write_ahead: self.delivery == Delivery::WriteAhead && ctx.checkpoints.is_some(),
            pending: Vec::new(),
            ahead: Vec::new(),
            interval: Vec::new(),
            interval_keys: std::collections::HashMap::new(),
            written: false,
            rows: String::new(),
        })
    }

    /// The job ended for good without finishing: rolls back the transactions the subtask
    /// `ctx` prepared and no completed checkpoint recorded (those the newest one recorded
    /// were committed first), which would otherwise hold their rows' locks until a next run
    /// of the job.
    pub(super) fn release(&self, ctx: &SinkContext<'_>) -> Result<(), ConnectorError> {
        if !self.delivery.transactional(ctx) {
            return Ok(());
        }
        let names = Names::new(ctx);
        let mut client = self.connect(&names.application)?;
        for gid in prepared(&mut client, &names.prefix)? {
            tracing::info!(
                gid,
                "rolling back a transaction of a checkpoint that never completed"
            );
            client
                .batch_execute(&format!("ROLLBACK PREPARED '{gid}'"))
                .map_err(|e| pg_error("roll back a prepared transaction", e))?;
        }
        Ok(())
    }

    /// Commits the prepared transactions `state` records; one that is gone was committed.
    /// A lost connection is retried; if the commits keep failing, the error fails the job,
    /// whose restore commits again.
    pub(super) fn commit(
        &self,
        ctx: &SinkContext<'_>,
        state: &serde_json::Value,
    ) -> Result<(), ConnectorError> {
        let Handle { pending, ahead } = Handle::parse(state)?;
        if pending.is_empty() && ahead.is_empty() {
            return Ok(());
        }
        let names = Names::new(ctx);
        let statements = Statements::new(self);
        let mut attempt = 1;
        loop {
            let result = self.connect(&names.application).and_then(|mut client| {
                pending
                    .iter()
                    .try_for_each(|gid| commit_prepared(&mut client, gid))?;
                ahead.iter().try_for_each(|changes| {
                    apply(&mut client, &statements, &self.table, changes).map(drop)
                })
            });
            match result {
                Ok(()) => return Ok(()),
                Err(e) if attempt < COMMIT_ATTEMPTS => {
                    tracing::warn!("commit failed (attempt {attempt}), retrying: {e}");
                    std::thread::sleep(Duration::from_millis(100 << attempt));
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn connect(&self, application: &str) -> Result<Client, ConnectorError> {
        let mut config: postgres::Config = self
            .connection
            .parse()
            .map_err(|e| ConnectorError::Invalid(format!("connection: {e}")))?;
        config
            .application_name(application)
            .connect_timeout(CONNECT_TIMEOUT);
        config
            .connect(NoTls)
            .map_err(|e| pg_error("connect to PostgreSQL", e))
    }
}

fn pg_error(action: &str, e: postgres::Error) -> ConnectorError {
    let detail = match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => e.to_string(),
    };
    let hint = match e.as_db_error() {
        Some(db) if db.message().contains("max_prepared_transactions") => {
            "; PostgreSQL must allow prepared transactions for two-phase commit: \
             ALTER SYSTEM SET max_prepared_transactions = 64 and restart the server"
        }
        // No unique index matches ON CONFLICT.
        Some(db) if db.code().code() == "42P10" => {
            "; mode = \"upsert\" needs a primary key or a unique index on exactly the `key` \
             columns: add one (ALTER TABLE ... ADD PRIMARY KEY (...)), or name its columns in \
             `key`"
        }
        _ => "",
    };
    // SQLSTATE classes that another attempt cannot fix: data exceptions (22), integrity
    // violations (23), bad credentials (28), a missing database (3D), syntax errors and
    // undefined tables or columns (42), and a server without prepared transactions (55000).
    let permanent = e.as_db_error().is_some_and(|db| {
        let code = db.code().code();
        ["22", "23", "28", "3D", "42"]
            .iter()
            .any(|class| code.starts_with(class))
            || code == "55000"
    });
    ConnectorError::External {
        message: format!("PostgreSQL sink: cannot {action}: {detail}{hint}"),
        permanent,
    }
}

/// The subtask's names in PostgreSQL.
struct Names {
    /// Of every global transaction id of the subtask.
    prefix: String,
    /// The `application_name` of its connections.
    application: String,
}

/// The longest `application_name` PostgreSQL keeps (`NAMEDATALEN` - 1 bytes; it cuts longer
/// ones).
const APPLICATION_NAME_MAX: usize = 63;
/// The longest global id prefix: PostgreSQL's ids take 199 bytes, and a checkpoint number
/// follows the prefix.
const PREFIX_MAX: usize = 170;

impl Names {
    fn new(ctx: &SinkContext<'_>) -> Names {
        // A global id is a string literal below; keep it free of quotes.
        let clean = |s: &str| s.replace(['\'', '\\'], "_");
        let of_sink = format!("weir/{}/{}", clean(ctx.job), clean(ctx.name));
        let subtask = format!("/{}", ctx.subtask);
        Names {
            prefix: format!(
                "{}{subtask}/",
                shorten(&of_sink, PREFIX_MAX - subtask.len() - 1)
            ),
            application: format!(
                "{}{subtask}",
                shorten(&of_sink, APPLICATION_NAME_MAX - subtask.len())
            ),
        }
    }
}

/// `name` if it has at most `max` bytes, else its head and a hash of all of it in `max`
/// bytes: distinct names of one sink's subtasks, and of other jobs' sinks, stay distinct.
fn shorten(name: &str, max: usize) -> String {
    if name.len() <= max {
        return name.to_owned();
    }
    let hash = Sha256::digest(name.as_bytes());
    let tail = format!(
        "~{:016x}",
        u64::from_le_bytes(hash[..8].try_into().expect("8 bytes"))
    );
    let mut head = max - tail.len();
    while !name.is_char_boundary(head) {
        head -= 1;
    }
    format!("{}{tail}", &name[..head])
}

/// Ends the other connections named `application`: those of a process that died run on
/// until they notice, and one of them could still prepare a transaction after the restore
/// rolled back the strays.
fn end_zombies(client: &mut Client, application: &str) -> Result<(), ConnectorError> {
    let others = "FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()";
    let fail = |e| pg_error("end the connections of an earlier run", e);
    client
        .execute(
            &format!("SELECT pg_terminate_backend(pid) {others}"),
            &[&application],
        )
        .map_err(fail)?;
    let deadline = std::time::Instant::now() + CONNECT_TIMEOUT;
    loop {
        let left: i64 = client
            .query_one(&format!("SELECT count(*) {others}"), &[&application])
            .map_err(fail)?
            .get(0);
        if left == 0 {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err(ConnectorError::External {
                message: format!(
                    "PostgreSQL sink: {left} connection(s) of an earlier run named \
                     {application} do not end"
                ),
                permanent: false,
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The prepared transactions whose global id starts with `prefix`.
fn prepared(client: &mut Client, prefix: &str) -> Result<Vec<String>, ConnectorError> {
    let rows = client
        .query(
            "SELECT gid FROM pg_prepared_xacts WHERE starts_with(gid, $1) AND database = \
             current_database()",
            &[&prefix],
        )
        .map_err(|e| pg_error("list prepared transactions", e))?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// `COMMIT PREPARED`; a transaction that is no longer prepared was committed before.
fn commit_prepared(client: &mut Client, gid: &str) -> Result<(), ConnectorError> {
    match client.batch_execute(&format!("COMMIT PREPARED '{gid}'")) {
        Ok(()) => Ok(()),
        // undefined_object: no prepared transaction with this id.
        Err(e) if e.code() == Some(&postgres::error::SqlState::UNDEFINED_OBJECT) => {
            tracing::debug!(gid, "prepared transaction already committed");
            Ok(())
        }
        Err(e) => Err(pg_error("commit a prepared transaction", e)),
    }
}

/// What the sink records in a checkpoint: the prepared transactions to commit.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Handle {
    pending: Vec<String>,
    /// Write-ahead: the changes of each checkpoint interval not known written, oldest first;
    /// a change is a row to upsert, or to delete when `true`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    ahead: Vec<Vec<(bool, String)>>,
}

impl Handle {
    fn parse(state: &serde_json::Value) -> Result<Handle, ConnectorError> {
        Handle::deserialize(state).map_err(|e| {
            ConnectorError::Invalid(format!(
                "the checkpointed state of the PostgreSQL sink is not valid: {e}"
            ))
        })
    }
}

/// The SQL of the sink's statements; `$1` is a JSON array of rows.
struct Statements {
    insert: String,
    delete: Option<String>,
    /// The table, quoted.
    table: String,
    /// The columns written, quoted, comma-separated.
    columns: String,
}

impl Statements {
    fn new(c: &PostgresSinkConfig) -> Statements {
        let table: Vec<String> = c.table.split('.').map(quoted).collect();
        let table = table.join(".");
        let rows = format!("json_populate_recordset(NULL::{table}, $1::text::json)");
        let mut columns: Vec<String> = c.columns.iter().map(|n| quoted(n)).collect();
        columns.extend(c.kind_column.iter().map(|n| quoted(n)));
        let list = columns.join(", ");
        let mut insert = format!("INSERT INTO {table} ({list}) SELECT {list} FROM {rows}");
        let delete = match c.mode {
            WriteMode::Append => None,
            WriteMode::Upsert => {
                let key: Vec<String> = c.key.iter().map(|n| quoted(n)).collect();
                let updates: Vec<String> = c
                    .columns
                    .iter()
                    .filter(|col| !c.key.contains(col))
                    .map(|col| format!("{0} = EXCLUDED.{0}", quoted(col)))
                    .collect();
                let action = if updates.is_empty() {
                    "DO NOTHING".to_owned()
                } else {
                    format!("DO UPDATE SET {}", updates.join(", "))
                };
                write!(insert, " ON CONFLICT ({}) {action}", key.join(", ")).expect("a String");
                let matches: Vec<String> = key.iter().map(|k| format!("t.{k} = d.{k}")).collect();
                Some(format!(
                    "DELETE FROM {table} AS t USING {rows} AS d WHERE {}",
                    matches.join(" AND ")
                ))
            }
        };
        Statements {
            insert,
            delete,
            table,
            columns: list,
        }
    }
}

/// Applies `changes` (one per key) as one DELETE and one INSERT ... ON CONFLICT; whether any
/// was applied.
fn apply(
    client: &mut Client,
    statements: &Statements,
    table: &str,
    changes: &[(bool, String)],
) -> Result<bool, ConnectorError> {
    let (mut deletes, mut upserts) = (String::from("["), String::from("["));
    for (delete, row) in changes {
        let out = if *delete { &mut deletes } else { &mut upserts };
        if out.len() > 1 {
            out.push(',');
        }
        out.push_str(row);
    }
    let fail = |e| pg_error(&format!("write to table {table}"), e);
    if deletes.len() > 1 {
        deletes.push(']');
        let sql = statements.delete.as_deref().expect("upsert mode deletes");
        client.execute(sql, &[&deletes]).map_err(fail)?;
    }
    if upserts.len() > 1 {
        upserts.push(']');
        client
            .execute(&statements.insert, &[&upserts])
            .map_err(fail)?;
    }
    Ok(!changes.is_empty())
}

/// One subtask of the PostgreSQL sink.
pub(super) struct PostgresSink {
    config: PostgresSinkConfig,
    statements: Statements,
    /// Writes, and holds the open transaction.
    client: Client,
    names: Names,
    transactional: bool,
    /// Write-ahead: the interval's changes are kept, not written.
    write_ahead: bool,
    /// Prepared transactions not known to be committed: checkpoint and global id.
    pending: Vec<(u64, String)>,
    /// Write-ahead: the changes of checkpoint intervals not known written, by checkpoint.
    ahead: Vec<(u64, Vec<(bool, String)>)>,
    /// Write-ahead: the current interval's last change per key, and where each key is.
    interval: Vec<(bool, String)>,
    interval_keys: std::collections::HashMap<Vec<u8>, usize>,
    /// Whether the open transaction has written anything.
    written: bool,
    /// Reused: append mode's rows, as a JSON array.
    rows: String,
}

/// Appends `bytes` as a JSON string.
fn json_string(out: &mut String, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    out.push_str(&serde_json::to_string(&*text).expect("a string serializes"));
}

fn kind_code(kind: Kind) -> &'static str {
    match kind {
        Kind::Insert => "+I",
        Kind::UpdateBefore => "-U",
        Kind::UpdateAfter => "+U",
        Kind::Delete => "-D",
    }
}

impl PostgresSink {
    /// The record as a JSON object of the configured columns.
    fn row(&self, rec: &RecordRef<'_>, out: &mut String) -> Result<(), ConnectorError> {
        let c = &self.config;
        match c.format {
            RowFormat::KeyValue => {
                out.push('{');
                json_string(out, c.columns[0].as_bytes());
                out.push(':');
                match rec.key {
                    Some(k) => json_string(out, k),
                    None => out.push_str("null"),
                }
                out.push(',');
                json_string(out, c.columns[1].as_bytes());
                out.push(':');
                json_string(out, rec.value);
            }
            RowFormat::Json => {
                let text = std::str::from_utf8(rec.value).ok().filter(|t| {
                    serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(t).is_ok()
                });
                let Some(text) = text else {
                    return Err(ConnectorError::Invalid(format!(
                        "PostgreSQL sink: format = \"json\" needs each value to be a JSON \
                         object, got {}",
                        String::from_utf8_lossy(&rec.value[..rec.value.len().min(80)])
                    )));
                };
                // The object without its closing brace, so a kind column can follow.
                let open = text.trim_end();
                out.push_str(open.strip_suffix('}').unwrap_or(open));
            }
        }
        if let Some(kind) = &c.kind_column {
            if !out.ends_with('{') {
                out.push(',');
            }
            json_string(out, kind.as_bytes());
            out.push(':');
            json_string(out, kind_code(rec.kind).as_bytes());
        }
        out.push('}');
        Ok(())
    }

    /// The upsert key of a row: the record's key, or the key columns of its JSON object.
    fn key_of(&self, rec: &RecordRef<'_>) -> Vec<u8> {
        match self.config.format {
            RowFormat::KeyValue => rec.key.unwrap_or_default().to_vec(),
            RowFormat::Json => {
                let object: serde_json::Map<String, serde_json::Value> =
                    serde_json::from_slice(rec.value).unwrap_or_default();
                let key: Vec<&serde_json::Value> = self
                    .config
                    .key
                    .iter()
                    .map(|k| object.get(k).unwrap_or(&serde_json::Value::Null))
                    .collect();
                serde_json::to_vec(&key).expect("a JSON value serializes")
            }
        }
    }

    fn execute(
        &mut self,
        sql_of: fn(&Statements) -> &str,
        rows: &str,
    ) -> Result<(), ConnectorError> {
        let sql = sql_of(&self.statements);
        self.client
            .execute(sql, &[&rows])
            .map_err(|e| pg_error(&format!("write to table {}", self.config.table), e))?;
        self.written = true;
        Ok(())
    }
}

impl Sink for PostgresSink {
    fn interrupter(&self) -> Option<Box<dyn Fn() + Send>> {
        let token = self.client.cancel_token();
        Some(Box::new(move || {
            if let Err(e) = token.cancel_query(NoTls) {
                tracing::debug!("cannot cancel the sink's statement: {e}");
            }
        }))
    }

    fn write(&mut self, batch: &Batch) -> Result<(), ConnectorError> {
        if batch.is_empty() {
            return Ok(());
        }
        let mut rows = std::mem::take(&mut self.rows);
        rows.clear();
        rows.push('[');
        match self.config.mode {
            WriteMode::Append => {
                for (i, rec) in batch.iter().enumerate() {
                    if i > 0 {
                        rows.push(',');
                    }
                    self.row(&rec, &mut rows)?;
                }
            }
            WriteMode::Upsert => {
                // The last change of each key wins: one statement may not touch a row twice.
                // Write-ahead keeps collapsing over the whole checkpoint interval.
                if !self.write_ahead {
                    self.interval.clear();
                    self.interval_keys.clear();
                }
                for rec in batch.iter() {
                    if rec.kind == Kind::UpdateBefore {
                        continue;
                    }
                    let mut row = String::new();
                    self.row(&rec, &mut row)?;
                    let change = (rec.kind == Kind::Delete, row);
                    match self.interval_keys.entry(self.key_of(&rec)) {
                        std::collections::hash_map::Entry::Occupied(at) => {
                            self.interval[*at.get()] = change;
                        }
                        std::collections::hash_map::Entry::Vacant(at) => {
                            at.insert(self.interval.len());
                            self.interval.push(change);
                        }
                    }
                }
                if !self.write_ahead {
                    let table = &self.config.table;
                    self.written |=
                        apply(&mut self.client, &self.statements, table, &self.interval)?;
                }
            }
        }
        rows.push(']');
        if rows.len() > 2 {
            self.execute(|s| &s.insert, &rows)?;
        }
        self.rows = rows;
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        Ok(())
    }

    fn snapshot(&mut self, checkpoint: u64) -> Result<serde_json::Value, ConnectorError> {
        if self.write_ahead && !self.interval.is_empty() {
            self.interval_keys.clear();
            self.ahead
                .push((checkpoint, std::mem::take(&mut self.interval)));
        }
        if self.transactional && self.written {
            let gid = format!("{}{checkpoint}", self.names.prefix);
            self.client
                .batch_execute(&format!("PREPARE TRANSACTION '{gid}'"))
                .map_err(|e| pg_error("prepare the checkpoint's transaction", e))?;
            self.client
                .batch_execute("BEGIN")
                .map_err(|e| pg_error("begin a transaction", e))?;
            self.pending.push((checkpoint, gid));
            self.written = false;
        }
        Ok(serde_json::to_value(Handle {
            pending: self.pending.iter().map(|(_, gid)| gid.clone()).collect(),
            ahead: self.ahead.iter().map(|(_, rows)| rows.clone()).collect(),
        })
        .expect("a handle serializes"))
    }

    fn notify_complete(&mut self, checkpoint: u64) -> Result<(), ConnectorError> {
        self.pending.retain(|(c, _)| *c > checkpoint);
        self.ahead.retain(|(c, _)| *c > checkpoint);
        Ok(())
    }

    fn finish(&mut self) -> Result<serde_json::Value, ConnectorError> {
        if self.write_ahead {
            return self.snapshot(u64::MAX);
        }
        if !self.transactional {
            return Ok(serde_json::Value::Null);
        }
        // The last transaction is committed once the job's end is recorded.
        let handle = self.snapshot(u64::MAX)?;
        self.client
            .batch_execute("ROLLBACK")
            .map_err(|e| pg_error("end the transaction", e))?;
        Ok(handle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(job: &str, sink: &str, subtask: usize) -> (String, String) {
        let ctx = SinkContext {
            job,
            name: sink,
            base_dir: std::path::Path::new("."),
            subtask,
            parallelism: 12,
            checkpoints: Some(std::path::Path::new("chk")),
        };
        let n = Names::new(&ctx);
        (n.prefix, n.application)
    }

    #[test]
    fn long_names_keep_subtasks_and_sinks_apart_within_postgres_limits() {
        assert_eq!(
            names("wc", "pg", 3),
            ("weir/wc/pg/3/".to_owned(), "weir/wc/pg/3".to_owned())
        );
        let (long, accented) = ("j".repeat(300), "é".repeat(80));
        let mut seen = std::collections::HashSet::new();
        for (job, sink) in [(&long, "a"), (&long, "b"), (&accented, "a")] {
            for subtask in [1, 10, 11] {
                let (prefix, application) = names(job, sink, subtask);
                assert!(application.len() <= APPLICATION_NAME_MAX, "{application}");
                assert!(prefix.len() + 20 <= 199, "{prefix}");
                assert!(
                    application.ends_with(&format!("/{subtask}")),
                    "{application}"
                );
                assert!(prefix.ends_with(&format!("/{subtask}/")), "{prefix}");
                assert!(seen.insert(application), "two subtasks share a name");
                assert!(seen.insert(prefix));
            }
        }
        // The same names every time: a restart finds what an earlier process left.
        assert_eq!(names(&long, "a", 1), names(&long, "a", 1));
    }

    fn config(extra: &str) -> Result<PostgresSinkConfig, String> {
        let c: PostgresSinkConfig = toml::from_str(&format!(
            "connection = \"host=127.0.0.1 user=postgres dbname=test\"\ntable = \"t\"\n{extra}"
        ))
        .map_err(|e| e.to_string())?;
        c.validate().map(|()| c)
    }

    #[test]
    fn statements_insert_upsert_and_delete_a_batch_at_a_time() {
        let c = config(
            "mode = \"upsert\"\nkey = [\"word\"]\nformat = \"key_value\"\ncolumns = [\"word\", \"n\"]",
        )
        .unwrap();
        let s = Statements::new(&c);
        assert_eq!(
            s.insert,
            "INSERT INTO \"t\" (\"word\", \"n\") SELECT \"word\", \"n\" FROM \
             json_populate_recordset(NULL::\"t\", $1::text::json) ON CONFLICT (\"word\") DO \
             UPDATE SET \"n\" = EXCLUDED.\"n\""
        );
        assert_eq!(
            s.delete.as_deref(),
            Some(
                "DELETE FROM \"t\" AS t USING json_populate_recordset(NULL::\"t\", \
                 $1::text::json) AS d WHERE t.\"word\" = d.\"word\""
            )
        );
    }

    #[test]
    fn bad_configurations_name_the_setting() {
        let err = |extra: &str| config(extra).unwrap_err();
        assert!(err("columns = [\"a\"]\nmode = \"upsert\"").contains("key = [...]"));
        assert!(err("columns = [\"a\"]\nformat = \"key_value\"").contains("two columns"));
        assert!(err("columns = [\"a; drop\"]").contains("not a plain name"));
        assert!(err("columns = []").contains("columns is empty"));
        assert!(
            err("columns = [\"a\"]\nmode = \"upsert\"\nkey = [\"b\"]").contains("not in columns")
        );
        assert!(config("columns = [\"a\"]\nconnection2 = 1").is_err());
        assert!(err("columns = [\"a\"]\ndelivery = \"write_ahead\"").contains("mode = \"upsert\""));
    }
}
