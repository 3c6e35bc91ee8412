//! Part 3: failover time, from the kill -9 of a replica to the events of its jobs delivered by
//! the replicas that took its shards over, repeated over the renewal cycle.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ::jobgate::model::{SHARD_COUNT, shard_of};
use chrono::{DateTime, Utc};
use futures::SinkExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::args::Args;
use crate::cluster::{Cluster, Replica, job_input, log_field, until_shards_divided};
use crate::common::postgres::Postgres;
use crate::common::submissions;
use crate::common::subscribers::{self, Faults, Receiver, open_socket};
use crate::common::{Table, WAIT};
use crate::report::{by_resource, push};
use crate::{ReplicaNames, SUCCEEDED};

/// One frame of the failover subscription.
pub(crate) struct Seen {
    /// When the bench read it.
    pub(crate) recv: DateTime<Utc>,
    /// When the replica that recorded the event recorded it.
    pub(crate) at: DateTime<Utc>,
    pub(crate) job: String,
    pub(crate) phase: u8,
}

/// The failover subscription's reader: keeps every frame.
#[derive(Default)]
pub(crate) struct Takeover {
    pub(crate) faults: Faults,
}

impl Receiver for Takeover {
    type Sample = Seen;

    fn frame(&self, text: &str, now: DateTime<Utc>, samples: &Mutex<Vec<Seen>>) {
        let event = match subscribers::event(text) {
            Ok(Some(event)) => event,
            Ok(None) => return self.fault(format!("no at, cursor or phase in: {text}")),
            Err(unexpected) => return self.fault(unexpected),
        };
        let job = text
            .split(r#""job":{"id":""#)
            .nth(1)
            .and_then(|rest| rest.split('"').next());
        let Some(job) = job else {
            return self.fault(format!("no job id in: {text}"));
        };
        samples.lock().unwrap().push(Seen {
            recv: now,
            at: event.at.with_timezone(&Utc),
            job: job.to_owned(),
            phase: event.phase,
        });
    }

    fn fault(&self, what: String) {
        self.faults.record(what);
    }
}

/// Waits until every job of `ids` has an event in `phase` among `frames`; false after
/// `limit`.
async fn until_all_in(frames: &Mutex<Vec<Seen>>, ids: &HashSet<String>, phase: u8, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        let reached: HashSet<String> = frames
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.phase == phase)
            .map(|s| s.job.clone())
            .collect();
        if ids.is_subset(&reached) {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Seconds from `t0` to `t`, as "+12.345 s".
pub(crate) fn after(t0: DateTime<Utc>, t: DateTime<Utc>) -> String {
    format!("{:+.3} s", (t - t0).num_microseconds().unwrap_or(0) as f64 / 1e6)
}

pub(crate) fn secs(d: chrono::TimeDelta) -> f64 {
    d.num_microseconds().unwrap_or(0) as f64 / 1e6
}

/// When the replica with this Lease last renewed it, by its own clock (this machine's), as
/// the emulator holds it.
fn last_renewal(cluster: &Cluster, lease_name: &str) -> Option<DateTime<Utc>> {
    let lease = cluster
        .emu
        .store()
        .get("leases.coordination.k8s.io", Some("default"), lease_name)?;
    let renewed = lease.pointer("/spec/renewTime")?.as_str()?;
    Some(DateTime::parse_from_rfc3339(renewed).ok()?.with_timezone(&Utc))
}

/// Part 3: kill -9 of a replica holding running jobs, until a survivor delivers their end.
pub(crate) async fn failover(
    args: &Args,
    cluster: &Cluster,
    postgres: &Postgres,
    replicas: &mut Vec<Replica>,
    dead: &mut Vec<Replica>,
    names: &mut ReplicaNames,
    table: &mut Table,
) {
    let lease = Duration::from_secs(args.lease_secs);
    let mut failover_times = Vec::new();
    let mut last_times = Vec::new();
    for run in 0..args.failover_runs {
        let what = format!("3. failover (lease {} s), run {}", args.lease_secs, run + 1);
        println!("\n-- {what}");
        let Some(owned) = until_shards_divided(replicas, WAIT + 2 * lease).await else {
            push(
                table,
                &what,
                "shards divided before the run",
                "NO: run left out".into(),
            );
            break;
        };
        let n = replicas.len();
        let (v, s) = (run % n, (run + 1) % n);
        println!(
            "  shards owned: {owned:?}; victim {}, subscriber and submissions on {}",
            replicas[v].id, replicas[s].id
        );

        // The survivor's subscription replays these jobs' events from the start of the log,
        // then goes live: nothing is missed, whenever it is registered.
        let name = format!("bench-failover-{run}-job");
        let hub = Arc::new(Takeover::default());
        let mut socket = open_socket(replicas[s].process.ws_url(), hub.clone())
            .await
            .expect("opening the failover subscription");
        let subscribe = json!({
            "id": "f",
            "type": "subscribe",
            "payload": {
                "query": "subscription($name: String) { jobEvents(after: \"0\", filter: { nameContains: $name }) { cursor phase at job { id } } }",
                "variables": { "name": name },
            },
        });
        socket
            .sink
            .send(Message::text(subscribe.to_string()))
            .await
            .expect("send subscribe");
        let gate = format!("bench-failover-{run}");
        let mut input = job_input(0, Some(&gate));
        input["name"] = json!(name);
        let submitted = submissions::many(
            &replicas[s].process.http,
            &replicas[s].process.url(),
            submissions::body(&input),
            args.failover_jobs,
            args.clients,
        )
        .await;
        submitted.assert_all_accepted("failover jobs");
        let ids: HashSet<String> = submitted.ids.iter().cloned().collect();
        let running = 1; // Index of RUNNING in PHASES.
        assert!(
            until_all_in(&socket.samples, &ids, running, WAIT + lease).await,
            "the failover jobs never all ran"
        );

        // Whose jobs are whose: the shards each replica acts for now.
        let shards: Vec<BTreeSet<u32>> =
            futures::future::join_all(replicas.iter().map(Replica::acted_for)).await;
        let union: BTreeSet<u32> = shards.iter().flatten().copied().collect();
        let total: usize = shards.iter().map(BTreeSet::len).sum();
        assert!(
            union.len() == SHARD_COUNT as usize && total == SHARD_COUNT as usize,
            "the replicas do not act for the 32 shards once each: {shards:?}"
        );
        let victim_jobs: HashSet<String> = ids
            .iter()
            .filter(|id| shards[v].contains(&shard_of(id)))
            .cloned()
            .collect();
        let owned_before: Vec<i64> = shards.iter().map(|s| s.len() as i64).collect();
        // The kill falls at a chosen point of the victim's renewal cycle (jobgate renews every
        // fifth of the lease): run k of n waits until the victim's last renewal is
        // (k + 0.5)/n of that interval old, so that the runs sweep the cycle evenly. Otherwise
        // the bench's own rhythm decides: the replicas start acting for their shards (and so
        // each run starts) right after a renewal, and every kill would come ~0.3 s after one.
        let lease_name = format!("jobgate-member-{}", replicas[v].id);
        let renew_every = (lease / 5).as_secs_f64();
        let target = renew_every * (run as f64 + 0.5) / args.failover_runs as f64;
        if let Some(renewed) = last_renewal(cluster, &lease_name) {
            let age = secs(Utc::now() - renewed);
            let wait = (target - age).rem_euclid(renew_every);
            tokio::time::sleep(Duration::from_secs_f64(wait)).await;
        }
        let renewed = last_renewal(cluster, &lease_name);

        // Kill first, then open the gate: no completion can be seen by the victim, so every
        // SUCCEEDED of its jobs is recorded by a replica that took its shards over.
        cluster.emu.reset_requests();
        let t0 = Utc::now();
        replicas[v].process.kill9();
        let killed = Utc::now();
        cluster.emu.simulation().open_gate(&gate);
        let victim = replicas.remove(v);
        let limit = WAIT + 4 * lease;
        let complete = until_all_in(&socket.samples, &ids, SUCCEEDED, limit).await;
        let window = secs(Utc::now() - t0);
        // Stragglers (a second SUCCEEDED would be one) have a moment to arrive.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let frames = std::mem::take(&mut *socket.samples.lock().unwrap());
        drop(socket);

        push(
            table,
            &what,
            "victim: shards; its jobs (of all)",
            format!(
                "{} of 32; {} of {}",
                shards[v].len(),
                victim_jobs.len(),
                ids.len()
            ),
        );
        if let Some(renewed) = renewed {
            push(
                table,
                &what,
                "victim's last Lease renewal, before the kill",
                format!("{:.3} s before", secs(t0 - renewed)),
            );
        }
        push(
            table,
            &what,
            "kill -9 (signal + reap)",
            format!("{:.1} ms", secs(killed - t0) * 1e3),
        );

        // Where the time went, on each survivor: its logged milestones after the kill.
        let mut detected: Option<DateTime<Utc>> = None;
        for (i, replica) in replicas.iter().enumerate() {
            let assigned = replica.milestones_since(t0, "shards assigned");
            if let Some((at, _)) = assigned.first() {
                detected = Some(detected.map_or(*at, |d| d.min(*at)));
            }
            let adopted = replica.milestones_since(t0, "adopted the running jobs");
            let listed = replica.milestones_since(t0, "first list done");
            let first = |lines: &[(DateTime<Utc>, String)]| {
                lines.first().map_or("-".to_owned(), |(at, _)| after(t0, *at))
            };
            let adopted_jobs = adopted
                .first()
                .and_then(|(_, l)| log_field(l, "jobs"))
                .unwrap_or("?")
                .to_owned();
            let before = owned_before[if i >= v { i + 1 } else { i }];
            let now = replica.gauge("jobgate_shards_owned").await;
            let live = replica.gauge("jobgate_replicas_live").await;
            for (at, line) in assigned.iter().chain(&adopted).chain(&listed) {
                println!("    {} {} {line}", replica.id, after(t0, *at));
            }
            push(
                table,
                &what,
                &format!(
                    "{}: shards {before}→{now}, {live} live; assigned / adopted ({adopted_jobs} jobs) / listed",
                    replica.id
                ),
                format!("{} / {} / {}", first(&assigned), first(&adopted), first(&listed)),
            );
        }

        // The survivors count the victim dead once its Lease has not changed for a lease
        // duration: this is how long after that moment the first of them acted on it.
        if let (Some(renewed), Some(detected)) = (renewed, detected) {
            let expired = renewed + chrono::TimeDelta::seconds(args.lease_secs as i64);
            push(
                table,
                &what,
                "victim's Lease expired → first survivor's shards assigned",
                format!("{:.3} s", secs(detected - expired)),
            );
        }

        // The figures: SUCCEEDED frames of the victim's jobs and of the others'.
        let succeeded: Vec<&Seen> = frames.iter().filter(|f| f.phase == SUCCEEDED).collect();
        let of_victim: Vec<&&Seen> = succeeded
            .iter()
            .filter(|f| victim_jobs.contains(&f.job))
            .collect();
        let of_survivors: Vec<&&Seen> = succeeded
            .iter()
            .filter(|f| !victim_jobs.contains(&f.job))
            .collect();
        let first_victim = of_victim.iter().map(|f| f.recv).min();
        let last_victim = of_victim.iter().map(|f| f.recv).max();
        if let (Some(first), Some(last)) = (first_victim, last_victim) {
            let (first, last) = (secs(first - t0), secs(last - t0));
            failover_times.push(first);
            last_times.push(last);
            push(
                table,
                &what,
                "FAILOVER: kill → first victim job's SUCCEEDED frame",
                format!("{first:.3} s"),
            );
            push(
                table,
                &what,
                "kill → last victim job's SUCCEEDED frame",
                format!("{last:.3} s"),
            );
        }
        let recorded_early = of_victim.iter().filter(|f| f.at < t0).count();
        if let Some(last) = of_survivors.iter().map(|f| f.recv).max() {
            push(
                table,
                &what,
                "kill → last survivor job's SUCCEEDED frame",
                format!("{:.3} s", secs(last - t0)),
            );
        }
        let mut once: HashMap<&str, usize> = HashMap::new();
        for f in &succeeded {
            *once.entry(f.job.as_str()).or_default() += 1;
        }
        let missing = ids.iter().filter(|id| !once.contains_key(id.as_str())).count();
        let duplicated: usize = once.values().map(|n| n.saturating_sub(1)).sum();
        let other_terminal = frames.iter().filter(|f| f.phase > SUCCEEDED).count();
        // One Kubernetes Job per job: none lost, none launched twice.
        let (jobs, _) = cluster.emu.store().list("jobs.batch", None, &|job| {
            job.pointer("/metadata/labels/jobgate.io~1job-id")
                .and_then(Value::as_str)
                .is_some_and(|id| ids.contains(id))
        });
        let mut per_job: HashMap<String, usize> = HashMap::new();
        for job in &jobs {
            let id = job["metadata"]["labels"]["jobgate.io/job-id"]
                .as_str()
                .unwrap_or("");
            *per_job.entry(id.to_owned()).or_default() += 1;
        }
        let not_one = ids.iter().filter(|id| per_job.get(*id) != Some(&1)).count();
        push(
            table,
            &what,
            "SUCCEEDED once (missing, twice; failed; before kill)",
            format!(
                "{} ({missing}, {duplicated}; {other_terminal}; {recorded_early}){}",
                once.len(),
                if complete { "" } else { " NOT ALL in time" }
            ),
        );
        push(
            table,
            &what,
            "Kubernetes Jobs (jobs without exactly one)",
            format!("{} ({not_one})", jobs.len()),
        );
        let counted = cluster.emu.requests();
        println!("  requests by resource: {}", by_resource(&counted));
        push(
            table,
            &what,
            "API requests, kill → last SUCCEEDED",
            format!(
                "{} in {window:.1} s: {}",
                counted.total,
                counted
                    .by_verb
                    .iter()
                    .map(|(verb, count)| format!("{verb} {count}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
        let faults = hub.faults.count.load(Ordering::Relaxed);
        if faults > 0 {
            for example in hub.faults.examples.lock().unwrap().iter() {
                println!("    unexpected: {example}");
            }
            push(
                table,
                &what,
                "unexpected frames on the subscription",
                faults.to_string(),
            );
        }
        dead.push(victim);
        // A new replica takes the victim's place for the next run.
        if run + 1 < args.failover_runs {
            let replica = Replica::start(cluster, &postgres.url(), args.lease_secs, names.next()).await;
            replicas.insert(v, replica);
        }
    }
    if !failover_times.is_empty() {
        let what = format!("3. failover (lease {} s), all runs", args.lease_secs);
        let list = |v: &[f64]| v.iter().map(|s| format!("{s:.2}")).collect::<Vec<_>>().join(", ");
        push(table, &what, "FAILOVER, s", list(&failover_times));
        push(
            table,
            &what,
            "kill → last victim job's SUCCEEDED, s",
            list(&last_times),
        );
    }
}
