//! What the two SQL databases differ in mechanically, behind one trait ([`Dialect`], for
//! `sqlx::Sqlite` and `sqlx::Postgres`), so that every statement the backends share is
//! written once ([`sql`]): how values are bound (a time is RFC 3339 text in SQLite, a
//! `timestamptz` in PostgreSQL; a list of namespaces is JSON text read with `json_each` in
//! SQLite, a `text[]` in PostgreSQL: [`List`]), how columns are read back, the few SQL
//! fragments that are spelled differently, how a read takes one snapshot, and whether write
//! steps have a time limit.
//!
//! Placeholders need no translation: SQLite reads `$1`, `$2`, … as PostgreSQL does (by
//! number), so shared statements use them for both. The one exception is the multi-row
//! INSERT, whose thousands of parameters SQLite must get as anonymous `?`
//! ([`Dialect::NUMBERED_PARAMS`]).
//!
//! It must not know tables beyond the fragments below, nor decide what to read or write.

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::stream::BoxStream;
use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use sqlx::{ColumnIndex, Postgres, Row as _, SqlSafeStr, Sqlite};

use crate::model::Scope;

/// A statement of `D` whose parameters are still being bound.
pub(crate) type BoundQuery<D> = sqlx::query::Query<'static, D, <D as sqlx::Database>::Arguments>;

/// What differs between the databases; see the module docs. Implemented for `sqlx::Sqlite`
/// and `sqlx::Postgres` only.
pub(crate) trait Dialect: sqlx::Database<Row: Columns> {
    /// This dialect's slot in per-dialect caches ([`sql_text!`](crate::store::sql::dialect::sql_text)).
    const ID: usize;

    /// What a read transaction runs first so that all its reads see one snapshot (`None`:
    /// every read transaction already does).
    const SNAPSHOT: Option<&'static str>;

    /// How long one step of a write transaction (its commit included) may take, or `None`
    /// when the database bounds it itself (see [`super::write_tx::bounded`]).
    const WRITE_STEP_TIMEOUT: Option<Duration>;

    /// Whether concurrent writers outside the write lock (replicas appending output) must
    /// lock the rows they read before they write them.
    const ROW_LOCKS: bool;

    /// `EXPLAIN` as this database says it for a plan of steps, and the column of each step.
    const EXPLAIN: &'static str;
    const EXPLAIN_STEP: usize;

    /// A job's shard in SQL, as [`crate::model::shard_of`] computes it for the ids jobgate
    /// makes (UUIDs: the last two hexadecimal digits, modulo the shard count).
    const SHARD_OF_ID: &'static str;

    /// The larger of two values.
    const GREATEST: &'static str;

    /// Whether a statement with many parameters must number them (`$1`, `$2`, …) or should
    /// leave them anonymous (`?`, bound in order). SQLite finds a numbered parameter's
    /// number by a linear search of the statement's parameter names, once per parameter
    /// bound, so a 500-row INSERT of 4,500 numbered parameters spends most of its time
    /// binding; anonymous ones bind in constant time.
    const NUMBERED_PARAMS: bool;

    fn bind<P: Param>(query: BoundQuery<Self>, value: P) -> BoundQuery<Self>;

    fn fetch_all(
        query: BoundQuery<Self>,
        conn: &mut Self::Connection,
    ) -> impl Future<Output = sqlx::Result<Vec<Self::Row>>> + Send;

    fn fetch_optional(
        query: BoundQuery<Self>,
        conn: &mut Self::Connection,
    ) -> impl Future<Output = sqlx::Result<Option<Self::Row>>> + Send;

    fn fetch_one(
        query: BoundQuery<Self>,
        conn: &mut Self::Connection,
    ) -> impl Future<Output = sqlx::Result<Self::Row>> + Send;

    /// Runs the statement; how many rows it changed.
    fn execute(
        query: BoundQuery<Self>,
        conn: &mut Self::Connection,
    ) -> impl Future<Output = sqlx::Result<u64>> + Send;

    fn fetch(query: BoundQuery<Self>, conn: &mut Self::Connection) -> BoxStream<'_, sqlx::Result<Self::Row>>;

    /// The parameter `param` typed as text where it is only tested for NULL.
    fn text(param: &str) -> String;

    /// `expr` as a 64-bit integer (PostgreSQL's sums are `numeric`).
    fn bigint(expr: &str) -> String;

    /// Whether the [`List`] bound as `param` is NULL (every namespace).
    fn list_is_null(param: &str) -> String;

    /// Whether `column` is in the [`List`] bound as `param`.
    fn in_list(column: &str, param: &str) -> String;

    /// Seconds since the Unix epoch of the time in `column`.
    fn epoch(column: &str) -> String;

    /// `column` is in the [`List`] bound as `param`, or the list is NULL.
    fn in_scope(column: &str, param: &str) -> String {
        format!(
            "({} OR {})",
            Self::list_is_null(param),
            Self::in_list(column, param)
        )
    }
}

/// A statement's text made once per dialect from its fragments (`format!` arguments) and kept
/// for the life of the process, where it is written: `sql_text!(D, "… {} …", D::in_list(…))`.
macro_rules! sql_text {
    ($d:ty, $($format:tt)+) => {{
        static TEXT: [std::sync::OnceLock<String>; 2] = [const { std::sync::OnceLock::new() }; 2];
        TEXT[<$d as $crate::store::sql::dialect::Dialect>::ID]
            .get_or_init(|| format!($($format)+))
            .as_str()
    }};
}
pub(crate) use sql_text;

/// A statement of `D` to bind and run: `sql::<D>("…").bind(a).bind(b).fetch_all(conn)`.
pub(crate) struct Sql<D: Dialect>(BoundQuery<D>);

pub(crate) fn sql<D: Dialect>(text: impl SqlSafeStr) -> Sql<D> {
    Sql(sqlx::query(text))
}

impl<D: Dialect> Sql<D> {
    pub(crate) fn bind(self, value: impl Param) -> Self {
        Self(D::bind(self.0, value))
    }

    pub(crate) async fn fetch_all(self, conn: &mut D::Connection) -> sqlx::Result<Vec<D::Row>> {
        D::fetch_all(self.0, conn).await
    }

    pub(crate) async fn fetch_optional(self, conn: &mut D::Connection) -> sqlx::Result<Option<D::Row>> {
        D::fetch_optional(self.0, conn).await
    }

    pub(crate) async fn fetch_one(self, conn: &mut D::Connection) -> sqlx::Result<D::Row> {
        D::fetch_one(self.0, conn).await
    }

    pub(crate) async fn execute(self, conn: &mut D::Connection) -> sqlx::Result<u64> {
        D::execute(self.0, conn).await
    }

    pub(crate) fn fetch(self, conn: &mut D::Connection) -> BoxStream<'_, sqlx::Result<D::Row>> {
        D::fetch(self.0, conn)
    }

    /// The first column of the one row the statement reads.
    pub(crate) async fn scalar<T: Column>(self, conn: &mut D::Connection) -> sqlx::Result<T> {
        Ok(self.fetch_one(conn).await?.col(0))
    }

    /// The first column of the row the statement reads, if it reads one.
    pub(crate) async fn scalar_optional<T: Column>(
        self,
        conn: &mut D::Connection,
    ) -> sqlx::Result<Option<T>> {
        Ok(self.fetch_optional(conn).await?.map(|row| row.col(0)))
    }

    /// The first column of every row the statement reads.
    pub(crate) async fn scalars<T: Column>(self, conn: &mut D::Connection) -> sqlx::Result<Vec<T>> {
        Ok(self.fetch_all(conn).await?.iter().map(|row| row.col(0)).collect())
    }
}

/// A list of namespaces (or ids) bound as one parameter, `None` for every namespace: JSON
/// text for SQLite's `json_each`, a `text[]` for PostgreSQL's `= ANY`.
#[derive(Clone, Debug)]
pub(crate) struct List(pub Option<Vec<String>>);

impl List {
    pub(crate) fn of_scope(scope: &Scope) -> Self {
        Self(scope.list().map(|set| set.iter().cloned().collect()))
    }

    fn json(self) -> Option<String> {
        self.0
            .map(|list| serde_json::to_string(&list).expect("a list of strings is JSON"))
    }
}

/// A value bound to a statement built at run time (see [`super::job_reads::Statement`]).
#[derive(Clone, Debug)]
pub(crate) enum Bind {
    Int(i64),
    Text(Option<String>),
    List(List),
    Time(DateTime<Utc>),
}

/// A value a statement of either dialect binds.
pub(crate) trait Param: Send {
    fn bind_sqlite(self, query: BoundQuery<Sqlite>) -> BoundQuery<Sqlite>;
    fn bind_postgres(self, query: BoundQuery<Postgres>) -> BoundQuery<Postgres>;
}

/// Values both databases encode alike.
macro_rules! same_param {
    ($($t:ty),+) => {$(
        impl Param for $t {
            fn bind_sqlite(self, query: BoundQuery<Sqlite>) -> BoundQuery<Sqlite> {
                query.bind(self)
            }
            fn bind_postgres(self, query: BoundQuery<Postgres>) -> BoundQuery<Postgres> {
                query.bind(self)
            }
        }
    )+};
}
same_param!(
    i64,
    Option<i64>,
    f64,
    String,
    Option<String>,
    &str,
    Option<&str>,
    &String,
    &Option<String>,
    Vec<u8>
);

/// A time: RFC 3339 text in SQLite (what its columns hold and `unixepoch` reads), a
/// `timestamptz` in PostgreSQL.
impl Param for DateTime<Utc> {
    fn bind_sqlite(self, query: BoundQuery<Sqlite>) -> BoundQuery<Sqlite> {
        query.bind(self.to_rfc3339())
    }
    fn bind_postgres(self, query: BoundQuery<Postgres>) -> BoundQuery<Postgres> {
        query.bind(self)
    }
}

impl Param for List {
    fn bind_sqlite(self, query: BoundQuery<Sqlite>) -> BoundQuery<Sqlite> {
        query.bind(self.json())
    }
    fn bind_postgres(self, query: BoundQuery<Postgres>) -> BoundQuery<Postgres> {
        query.bind(self.0)
    }
}

impl Param for Bind {
    fn bind_sqlite(self, query: BoundQuery<Sqlite>) -> BoundQuery<Sqlite> {
        match self {
            Bind::Int(v) => v.bind_sqlite(query),
            Bind::Text(v) => v.bind_sqlite(query),
            Bind::List(v) => v.bind_sqlite(query),
            Bind::Time(v) => v.bind_sqlite(query),
        }
    }
    fn bind_postgres(self, query: BoundQuery<Postgres>) -> BoundQuery<Postgres> {
        match self {
            Bind::Int(v) => v.bind_postgres(query),
            Bind::Text(v) => v.bind_postgres(query),
            Bind::List(v) => v.bind_postgres(query),
            Bind::Time(v) => v.bind_postgres(query),
        }
    }
}

/// A column's name or position, in either database's rows.
pub(crate) trait Index: ColumnIndex<SqliteRow> + ColumnIndex<PgRow> + std::fmt::Debug {}
impl Index for &str {}
impl Index for usize {}

/// A value read from a column of either database's rows. Like `sqlx::Row::get`, a column of
/// another type is a bug in the statement, and panics.
pub(crate) trait Column: Sized {
    fn from_sqlite(row: &SqliteRow, index: impl Index) -> Self;
    fn from_postgres(row: &PgRow, index: impl Index) -> Self;
}

/// Values both databases decode alike.
macro_rules! same_column {
    ($($t:ty),+) => {$(
        impl Column for $t {
            fn from_sqlite(row: &SqliteRow, index: impl Index) -> Self {
                row.get(index)
            }
            fn from_postgres(row: &PgRow, index: impl Index) -> Self {
                row.get(index)
            }
        }
    )+};
}
same_column!(i64, i16, Option<i64>, String, Option<String>, Vec<u8>);

/// A time as [`DateTime<Utc>`]'s [`Param`] stores it; SQLite text that does not parse reads
/// as the Unix epoch.
impl Column for DateTime<Utc> {
    fn from_sqlite(row: &SqliteRow, index: impl Index) -> Self {
        DateTime::parse_from_rfc3339(row.get(index))
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default()
    }
    fn from_postgres(row: &PgRow, index: impl Index) -> Self {
        row.get(index)
    }
}

/// Reading a row of either database.
pub(crate) trait Columns {
    fn col<T: Column>(&self, index: impl Index) -> T;
}

impl Columns for SqliteRow {
    fn col<T: Column>(&self, index: impl Index) -> T {
        T::from_sqlite(self, index)
    }
}

impl Columns for PgRow {
    fn col<T: Column>(&self, index: impl Index) -> T {
        T::from_postgres(self, index)
    }
}

impl Dialect for Sqlite {
    const ID: usize = 0;
    /// A read transaction reads one WAL snapshot.
    const SNAPSHOT: Option<&'static str> = None;
    /// The database is a local file: nothing answers late but a lock, and waiting for the
    /// lock is bounded by the connection's `busy_timeout` (10 s), which fails the step
    /// instead. A step cut off from outside would leave the write connection busy on its
    /// thread.
    const WRITE_STEP_TIMEOUT: Option<Duration> = None;
    const NUMBERED_PARAMS: bool = false;
    /// One write connection: no one else writes meanwhile.
    const ROW_LOCKS: bool = false;
    const EXPLAIN: &'static str = "EXPLAIN QUERY PLAN";
    const EXPLAIN_STEP: usize = 3;
    const SHARD_OF_ID: &'static str = "(((instr('0123456789abcdef', lower(substr(id, -2, 1))) - 1) * 16 \
         + instr('0123456789abcdef', lower(substr(id, -1, 1))) - 1) % 32)";
    const GREATEST: &'static str = "max";

    fn bind<P: Param>(query: BoundQuery<Self>, value: P) -> BoundQuery<Self> {
        value.bind_sqlite(query)
    }

    async fn fetch_all(query: BoundQuery<Self>, conn: &mut Self::Connection) -> sqlx::Result<Vec<Self::Row>> {
        query.fetch_all(conn).await
    }

    async fn fetch_optional(
        query: BoundQuery<Self>,
        conn: &mut Self::Connection,
    ) -> sqlx::Result<Option<Self::Row>> {
        query.fetch_optional(conn).await
    }

    async fn fetch_one(query: BoundQuery<Self>, conn: &mut Self::Connection) -> sqlx::Result<Self::Row> {
        query.fetch_one(conn).await
    }

    async fn execute(query: BoundQuery<Self>, conn: &mut Self::Connection) -> sqlx::Result<u64> {
        Ok(query.execute(conn).await?.rows_affected())
    }

    fn fetch(query: BoundQuery<Self>, conn: &mut Self::Connection) -> BoxStream<'_, sqlx::Result<Self::Row>> {
        query.fetch(conn)
    }

    fn text(param: &str) -> String {
        param.to_owned()
    }

    fn bigint(expr: &str) -> String {
        expr.to_owned()
    }

    fn list_is_null(param: &str) -> String {
        format!("{param} IS NULL")
    }

    fn in_list(column: &str, param: &str) -> String {
        format!("{column} IN (SELECT value FROM json_each({param}))")
    }

    /// unixepoch() reads the stored RFC 3339 text (fraction and offset included).
    fn epoch(column: &str) -> String {
        format!("unixepoch({column})")
    }
}

impl Dialect for Postgres {
    const ID: usize = 1;
    const SNAPSHOT: Option<&'static str> = Some("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY");
    /// A server that hangs (frozen, or cut off without a reset) must not hold the writer, and
    /// every caller waiting on it, forever.
    const WRITE_STEP_TIMEOUT: Option<Duration> = Some(Duration::from_secs(10));
    const NUMBERED_PARAMS: bool = true;
    const ROW_LOCKS: bool = true;
    const EXPLAIN: &'static str = "EXPLAIN";
    const EXPLAIN_STEP: usize = 0;
    const SHARD_OF_ID: &'static str = "((('x' || right(id, 2))::bit(8)::int) % 32)";
    const GREATEST: &'static str = "greatest";

    fn bind<P: Param>(query: BoundQuery<Self>, value: P) -> BoundQuery<Self> {
        value.bind_postgres(query)
    }

    async fn fetch_all(query: BoundQuery<Self>, conn: &mut Self::Connection) -> sqlx::Result<Vec<Self::Row>> {
        query.fetch_all(conn).await
    }

    async fn fetch_optional(
        query: BoundQuery<Self>,
        conn: &mut Self::Connection,
    ) -> sqlx::Result<Option<Self::Row>> {
        query.fetch_optional(conn).await
    }

    async fn fetch_one(query: BoundQuery<Self>, conn: &mut Self::Connection) -> sqlx::Result<Self::Row> {
        query.fetch_one(conn).await
    }

    async fn execute(query: BoundQuery<Self>, conn: &mut Self::Connection) -> sqlx::Result<u64> {
        Ok(query.execute(conn).await?.rows_affected())
    }

    fn fetch(query: BoundQuery<Self>, conn: &mut Self::Connection) -> BoxStream<'_, sqlx::Result<Self::Row>> {
        query.fetch(conn)
    }

    fn text(param: &str) -> String {
        format!("{param}::text")
    }

    fn bigint(expr: &str) -> String {
        format!("{expr}::bigint")
    }

    fn list_is_null(param: &str) -> String {
        format!("{param}::text[] IS NULL")
    }

    fn in_list(column: &str, param: &str) -> String {
        format!("{column} = ANY({param})")
    }

    fn epoch(column: &str) -> String {
        format!("floor(extract(epoch FROM {column}))::bigint")
    }
}

const _: () = assert!(crate::model::SHARD_COUNT == 32, "SHARD_OF_ID divides by 32");
