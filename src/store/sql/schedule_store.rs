//! Schedules' statements, for both backends ([`ScheduleStore`] over any [`Backend`]): each
//! write a small transaction of its own, a change and its event together, under the store's
//! write lock ([`Backend::begin_write`]): on PostgreSQL a `bigserial` value is taken before
//! its commit, so without one writer at a time an event could commit after a later one and a
//! feed resuming after the later cursor would pass it over.
//!
//! It must not decide when a schedule fires (the schedules service does).

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::Backend;
use super::dialect::{Dialect, List, sql, sql_text};
use super::write_tx::{WriteTx, bounded};
use crate::model::{Schedule, ScheduleEvent, Scope};
use crate::store::schedule_rows::{
    NotInserted, SCHEDULE_COLUMNS, SCHEDULE_EVENT_COLUMNS, ScheduleStore, millis, read_schedule,
    read_schedule_event, schedule_json,
};
use crate::store::unreadable::{RowKind, unreadable_error};
use crate::store::{Result, StoreTx as _};

/// Appends `event` in `tx`; `None` when its job is already recorded. Its commit wakes the
/// replicas' schedule feeds.
async fn append<B: Backend>(tx: &mut B::Tx, event: &ScheduleEvent) -> Result<Option<i64>> {
    tx.wake_on_commit();
    let text = "INSERT INTO schedule_events (schedule_id, namespace, kind, at, tick, job_id, message, schedule) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
         ON CONFLICT (job_id) WHERE job_id IS NOT NULL DO NOTHING RETURNING seq";
    let snapshot = event.schedule.as_deref().map(schedule_json).transpose()?;
    let query = sql::<B::Db>(text)
        .bind(event.schedule_id.as_str())
        .bind(event.namespace.as_str())
        .bind(event.kind.as_str())
        .bind(millis(event.at))
        .bind(event.tick.map(millis))
        .bind(event.job_id.as_deref())
        .bind(event.message.as_deref())
        .bind(snapshot);
    bounded::<B::Db, _>(async { Ok(query.scalar_optional::<i64>(tx.conn()).await?) }).await
}

#[async_trait]
impl<B: Backend> ScheduleStore for B {
    async fn insert_schedule(
        &self,
        schedule: &Schedule,
        event: &ScheduleEvent,
        max_in_namespace: u64,
    ) -> Result<Result<i64, NotInserted>> {
        let mut tx = Backend::begin_write(self).await?;
        let count = sql::<B::Db>("SELECT count(*) FROM schedules WHERE namespace = $1")
            .bind(schedule.namespace.as_str());
        let count: i64 = bounded::<B::Db, _>(async { Ok(count.scalar(tx.conn()).await?) }).await?;
        if max_in_namespace > 0 && count as u64 >= max_in_namespace {
            return Ok(Err(NotInserted::Full));
        }
        let taken = sql::<B::Db>("SELECT count(*) FROM schedules WHERE namespace = $1 AND name = $2")
            .bind(schedule.namespace.as_str())
            .bind(schedule.name.as_str());
        let taken: i64 = bounded::<B::Db, _>(async { Ok(taken.scalar(tx.conn()).await?) }).await?;
        if taken > 0 {
            return Ok(Err(NotInserted::NameTaken));
        }
        let insert = sql::<B::Db>(
            "INSERT INTO schedules (id, namespace, name, owner, body, revision) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(schedule.id.as_str())
        .bind(schedule.namespace.as_str())
        .bind(schedule.name.as_str())
        .bind(schedule.owner.as_str())
        .bind(schedule_json(schedule)?)
        .bind(schedule.revision);
        let inserted = bounded::<B::Db, _>(async { Ok(insert.execute(tx.conn()).await) }).await?;
        match inserted {
            Ok(_) => {}
            // A concurrent create of the same name.
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                return Ok(Err(NotInserted::NameTaken));
            }
            Err(e) => return Err(e.into()),
        }
        let seq = append::<B>(&mut tx, event).await?.unwrap_or_default();
        Box::new(tx).commit().await?;
        Ok(Ok(seq))
    }

    async fn schedule(&self, id: &str) -> Result<Option<Schedule>> {
        let text = sql_text!(B::Db, "SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE id = $1");
        let mut conn = self.pool().acquire().await?;
        let unreadable = self.unreadable_rows();
        sql::<B::Db>(text)
            .bind(id)
            .fetch_optional(&mut *conn)
            .await?
            .map(|row| {
                read_schedule(&row, unreadable)
                    .ok_or_else(|| unreadable_error(unreadable, RowKind::Schedule, id))
            })
            .transpose()
    }

    async fn schedules(&self, scope: &Scope, after: Option<&str>, first: i64) -> Result<Vec<Schedule>> {
        let text = sql_text!(
            B::Db,
            "SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE {} AND ({} IS NULL OR id > $2) ORDER BY id LIMIT $3",
            B::Db::in_scope("namespace", "$1"),
            <B::Db as Dialect>::text("$2")
        );
        let mut conn = self.pool().acquire().await?;
        let rows = sql::<B::Db>(text)
            .bind(List::of_scope(scope))
            .bind(after)
            .bind(first + 1)
            .fetch_all(&mut *conn)
            .await?;
        Ok(rows
            .iter()
            .filter_map(|row| read_schedule(row, self.unreadable_rows()))
            .collect())
    }

    async fn all_schedules(&self) -> Result<Vec<Schedule>> {
        let text = sql_text!(B::Db, "SELECT {SCHEDULE_COLUMNS} FROM schedules ORDER BY id");
        let mut conn = self.pool().acquire().await?;
        let rows = sql::<B::Db>(text).fetch_all(&mut *conn).await?;
        Ok(rows
            .iter()
            .filter_map(|row| read_schedule(row, self.unreadable_rows()))
            .collect())
    }

    async fn update_schedule(
        &self,
        schedule: &Schedule,
        expected_revision: i64,
        event: &ScheduleEvent,
    ) -> Result<Option<i64>> {
        let mut tx = Backend::begin_write(self).await?;
        let update =
            sql::<B::Db>("UPDATE schedules SET body = $2, revision = $3 WHERE id = $1 AND revision = $4")
                .bind(schedule.id.as_str())
                .bind(schedule_json(schedule)?)
                .bind(schedule.revision)
                .bind(expected_revision);
        let changed = bounded::<B::Db, _>(async { Ok(update.execute(tx.conn()).await?) }).await?;
        if changed == 0 {
            return Ok(None);
        }
        let seq = append::<B>(&mut tx, event).await?;
        Box::new(tx).commit().await?;
        Ok(seq)
    }

    async fn owner_schedules(&self, owner: &str) -> Result<Vec<Schedule>> {
        let text = sql_text!(
            B::Db,
            "SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE owner = $1 ORDER BY id"
        );
        let mut conn = self.pool().acquire().await?;
        let rows = sql::<B::Db>(text).bind(owner).fetch_all(&mut *conn).await?;
        Ok(rows
            .iter()
            .filter_map(|row| read_schedule(row, self.unreadable_rows()))
            .collect())
    }

    async fn narrow_schedule_scope(&self, id: &str, from: &Scope, to: &Scope) -> Result<bool> {
        let mut tx = Backend::begin_write(self).await?;
        let text = sql_text!(B::Db, "SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE id = $1");
        let read = sql::<B::Db>(text).bind(id);
        let row = bounded::<B::Db, _>(async { Ok(read.fetch_optional(tx.conn()).await?) }).await?;
        let Some(mut schedule) = row.and_then(|row| read_schedule(&row, self.unreadable_rows())) else {
            return Ok(false);
        };
        if schedule.owner_scope != *from {
            return Ok(false);
        }
        schedule.owner_scope = to.clone();
        schedule.revision += 1;
        let update = sql::<B::Db>("UPDATE schedules SET body = $2, revision = $3 WHERE id = $1")
            .bind(id)
            .bind(schedule_json(&schedule)?)
            .bind(schedule.revision);
        bounded::<B::Db, _>(async { Ok(update.execute(tx.conn()).await?) }).await?;
        Box::new(tx).commit().await?;
        Ok(true)
    }

    async fn delete_schedule(&self, id: &str, event: &ScheduleEvent) -> Result<Option<i64>> {
        let mut tx = Backend::begin_write(self).await?;
        let delete = sql::<B::Db>("DELETE FROM schedules WHERE id = $1").bind(id);
        let changed = bounded::<B::Db, _>(async { Ok(delete.execute(tx.conn()).await?) }).await?;
        if changed == 0 {
            return Ok(None);
        }
        let seq = append::<B>(&mut tx, event).await?;
        Box::new(tx).commit().await?;
        Ok(seq)
    }

    async fn schedule_ticked(
        &self,
        id: &str,
        tick: DateTime<Utc>,
        fired: bool,
        blocked: Option<&str>,
        event: Option<&ScheduleEvent>,
    ) -> Result<bool> {
        let mut tx = Backend::begin_write(self).await?;
        let update = sql::<B::Db>(
            "UPDATE schedules SET last_tick = $2, \
             last_fired = CASE WHEN $3 = 1 THEN $2 ELSE last_fired END, blocked_reason = $4 \
             WHERE id = $1 AND (last_tick IS NULL OR last_tick < $2)",
        )
        .bind(id)
        .bind(millis(tick))
        .bind(i64::from(fired))
        .bind(blocked);
        let changed = bounded::<B::Db, _>(async { Ok(update.execute(tx.conn()).await?) }).await?;
        if changed == 0 {
            return Ok(false);
        }
        if let Some(event) = event {
            append::<B>(&mut tx, event).await?;
        }
        Box::new(tx).commit().await?;
        Ok(true)
    }

    async fn record_schedule_event(&self, event: &ScheduleEvent) -> Result<Option<i64>> {
        let mut tx = Backend::begin_write(self).await?;
        let seq = append::<B>(&mut tx, event).await?;
        Box::new(tx).commit().await?;
        Ok(seq)
    }

    async fn schedule_events(&self, scope: &Scope, after: i64, limit: i64) -> Result<Vec<ScheduleEvent>> {
        let text = sql_text!(
            B::Db,
            "SELECT {SCHEDULE_EVENT_COLUMNS} FROM schedule_events WHERE seq > $2 AND {} ORDER BY seq LIMIT $3",
            B::Db::in_scope("namespace", "$1")
        );
        let mut conn = self.pool().acquire().await?;
        let rows = sql::<B::Db>(text)
            .bind(List::of_scope(scope))
            .bind(after)
            .bind(limit)
            .fetch_all(&mut *conn)
            .await?;
        Ok(rows
            .iter()
            .filter_map(|row| read_schedule_event(row, self.unreadable_rows()))
            .collect())
    }

    async fn schedule_runs(&self, id: &str, limit: i64) -> Result<Vec<ScheduleEvent>> {
        let text = sql_text!(
            B::Db,
            "SELECT {SCHEDULE_EVENT_COLUMNS} FROM schedule_events \
             WHERE schedule_id = $1 AND job_id IS NOT NULL ORDER BY seq DESC LIMIT $2"
        );
        let mut conn = self.pool().acquire().await?;
        let rows = sql::<B::Db>(text)
            .bind(id)
            .bind(limit)
            .fetch_all(&mut *conn)
            .await?;
        Ok(rows
            .iter()
            .filter_map(|row| read_schedule_event(row, self.unreadable_rows()))
            .collect())
    }

    async fn last_schedule_event_seq(&self) -> Result<i64> {
        let mut conn = self.pool().acquire().await?;
        let seq: Option<i64> = sql::<B::Db>("SELECT max(seq) FROM schedule_events")
            .scalar(&mut *conn)
            .await?;
        Ok(seq.unwrap_or_default())
    }
}
