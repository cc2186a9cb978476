//! Who keeps a connection when they are too many (SPEC §4, issue 25 item
//! 6): the cap on open connections bounds memory, and under a flood it
//! sheds the connections that are worth least, as Envoy's overload manager
//! does, instead of refusing whoever comes next.
//!
//! A connection is, in the order it is shed:
//!
//! 1. *handshaking*: TCP open, the TLS handshake not done (anyone can open
//!    these by the thousand and finish none);
//! 2. *quiet*: the handshake done, no request sent yet;
//! 3. *idle*: it has sent reviews and waits between them (an API server's
//!    keep-alive connection), the longest idle first, and only after a
//!    second of silence;
//! 4. *busy*: a review in flight: never shed.
//!
//! A new connection at the cap takes the place of the first of those, so
//! the API server's new connections still get in under a flood of
//! connections that never send a review, and those that do send reviews
//! keep being served. A source whose connections have had reviews answered
//! (the API server's address) is *known*: a stranger's new connection only
//! ever takes the place of another stranger's, while a known source's may
//! take a stranger's first, so that a flood from many addresses that
//! finish handshakes faster than a review is read cannot churn the API
//! server's fresh connections away. A source (an IP address) holds at most
//! a share of the cap: past it, its own least valuable connection makes
//! room, so one client cannot fill the table with connections that each
//! sent one review. Under pressure (three quarters full) a handshake gets
//! a shorter bound.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

// The maps by source address hash with foldhash, seeded per process, as
// a decision's maps do: they are bounded (the connection cap, the known
// sources' bound), so even chosen collisions cost at most a scan of them.
use crate::decide::Map;

/// What a connection is doing, for who keeps their place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Stage {
    Handshaking,
    Quiet,
    Idle,
    Busy,
}

/// How long an idle connection must have been silent before it may be
/// shed: one between two reviews of a steady client is not.
const IDLE_BEFORE_SHED: Duration = Duration::from_secs(1);

/// The handshake bound while the table is three quarters full.
pub const HANDSHAKE_TIMEOUT_UNDER_PRESSURE: Duration = Duration::from_secs(2);

#[derive(Debug)]
struct Entry {
    source: IpAddr,
    /// Its source had reviews answered when it came in.
    known: bool,
    stage: Stage,
    /// Reviews in flight on it (HTTP/2 multiplexes).
    in_flight: u32,
    /// When it entered its stage (or last went idle).
    since: Instant,
    shed: Arc<Notify>,
}

#[derive(Debug, Default)]
struct Table {
    entries: Map<u64, Entry>,
    per_source: Map<IpAddr, usize>,
    /// Sources that had a review answered, and when last: the API
    /// servers, in practice; the longest silent forgotten past
    /// [`KNOWN_SOURCES`].
    known: Map<IpAddr, Instant>,
    next: u64,
}

/// Sources remembered as known: a cluster has a handful of API servers.
const KNOWN_SOURCES: usize = 256;

impl Table {
    /// The connection worth least, if any may go: of `source` only, when
    /// given; a known source's only when `known` asks (a stranger never
    /// takes a known source's place).
    fn least_valuable(&self, now: Instant, source: Option<IpAddr>, known: bool) -> Option<u64> {
        self.entries
            .iter()
            .filter(|(_, e)| source.is_none_or(|s| e.source == s))
            .filter(|(_, e)| known || !e.known)
            .filter(|(_, e)| match e.stage {
                Stage::Handshaking | Stage::Quiet => true,
                Stage::Idle => now.duration_since(e.since) >= IDLE_BEFORE_SHED,
                Stage::Busy => false,
            })
            // Strangers first, then by stage, the oldest first; ids break
            // ties (they grow with each admission).
            .min_by_key(|&(&id, e)| (e.known, e.stage, e.since, id))
            .map(|(&id, _)| id)
    }

    /// Tell a connection to go, and give its place back at once: it
    /// holds no place while its task winds down, so it is never chosen
    /// twice and the table never counts past the cap.
    fn shed(&mut self, id: u64) {
        if let Some(entry) = self.entries.remove(&id) {
            entry.shed.notify_one();
            if let Some(count) = self.per_source.get_mut(&entry.source) {
                *count -= 1;
                if *count == 0 {
                    self.per_source.remove(&entry.source);
                }
            }
        }
    }
}

/// The open connections, their stages, and the cap.
#[derive(Debug)]
pub struct Connections {
    table: Mutex<Table>,
    cap: usize,
    /// A known source's share (an API server's).
    per_source: usize,
    /// A stranger's share: a quarter of the cap at most, so that one
    /// address that never had a review answered (holding its requests
    /// busy, say) cannot keep a known source to less than three quarters.
    stranger_share: usize,
}

/// Why a connection was not let in, or why another made room for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// At the cap, every connection busy or serving reviews.
    Full,
    /// Its source at its share of the cap, every one of that source's
    /// connections busy or serving reviews.
    SourceFull,
}

impl Refused {
    /// The metrics' `reason` label.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Full => "cap",
            Self::SourceFull => "source_share",
        }
    }
}

impl Connections {
    /// `cap` connections at most, `per_source` of them from one address.
    pub fn new(cap: usize, per_source: usize) -> Arc<Self> {
        let cap = cap.max(1);
        let per_source = per_source.clamp(1, cap);
        Arc::new(Self {
            table: Mutex::new(Table::default()),
            cap,
            per_source,
            stranger_share: per_source.min((cap / 4).max(50)),
        })
    }

    /// A share of the cap for one source: three quarters, at least 50
    /// (an API server keeps up to 25 idle connections per webhook path).
    /// An API server calls a webhook over HTTP/1.1, one connection per
    /// call in flight, and may have 600 requests in flight
    /// (`--max-requests-inflight` 400 and `--max-mutating-requests-inflight`
    /// 200): in a burst of creates its connections must fit in its share,
    /// or its own new connections shed its others and calls fail with a
    /// reset connection. The quarter left keeps room for the others.
    pub fn default_per_source(cap: usize) -> usize {
        (cap * 3 / 4).max(50)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Let a new connection from `source` in, making room when the table
    /// is full (or the source holds its share) by shedding the least
    /// valuable connection; refused when nothing may be shed. With the
    /// slot, why another connection was told to go to make room, if one
    /// was (the same reasons as a refusal's).
    ///
    /// # Errors
    ///
    /// [`Refused::SourceFull`] when every connection of the source is
    /// serving, [`Refused::Full`] when every connection in the way is.
    pub fn admit(self: &Arc<Self>, source: IpAddr) -> Result<(Slot, Option<Refused>), Refused> {
        let now = Instant::now();
        let mut table = self.lock();
        let known = table.known.contains_key(&source);
        let from_source = table.per_source.get(&source).copied().unwrap_or(0);
        let share = if known {
            self.per_source
        } else {
            self.stranger_share
        };
        // A share as large as the cap is no share: the cap is what binds.
        let made_room = if from_source >= share && share < self.cap {
            let victim = table
                .least_valuable(now, Some(source), true)
                .ok_or(Refused::SourceFull)?;
            table.shed(victim);
            Some(Refused::SourceFull)
        } else if table.entries.len() >= self.cap {
            let victim = table
                .least_valuable(now, None, known)
                .ok_or(Refused::Full)?;
            table.shed(victim);
            Some(Refused::Full)
        } else {
            None
        };
        let id = table.next;
        table.next += 1;
        let shed = Arc::new(Notify::new());
        table.entries.insert(
            id,
            Entry {
                source,
                known,
                stage: Stage::Handshaking,
                in_flight: 0,
                since: now,
                shed: shed.clone(),
            },
        );
        *table.per_source.entry(source).or_default() += 1;
        let slot = Slot {
            connections: self.clone(),
            id,
            shed,
        };
        Ok((slot, made_room))
    }

    /// Whether the table is three quarters full: handshakes get
    /// [`HANDSHAKE_TIMEOUT_UNDER_PRESSURE`].
    pub fn under_pressure(&self) -> bool {
        self.lock().entries.len() * 4 >= self.cap * 3
    }

    /// Connections open, for tests and the metrics.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn set(&self, id: u64, change: impl FnOnce(&mut Entry)) {
        if let Some(entry) = self.lock().entries.get_mut(&id) {
            change(entry);
        }
    }
}

/// A request in flight on a connection: the connection is busy (never
/// shed) until it is dropped, answered or not (an HTTP/2 stream reset
/// drops its handler half way: the connection must not stay busy).
#[derive(Debug)]
pub struct Busy {
    slot: Arc<Slot>,
    decided: bool,
}

impl Busy {
    pub fn new(slot: Arc<Slot>) -> Self {
        slot.review_started();
        Self {
            slot,
            decided: false,
        }
    }

    /// The request was a review, answered 200: its source is known.
    pub fn reviewed(mut self) {
        self.decided = true;
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.slot.request_ended(self.decided);
    }
}

/// A connection's place in the table, given back when dropped.
#[derive(Debug)]
pub struct Slot {
    connections: Arc<Connections>,
    id: u64,
    shed: Arc<Notify>,
}

impl Slot {
    /// The TLS handshake is done.
    pub fn handshaken(&self) {
        self.connections.set(self.id, |e| {
            e.stage = Stage::Quiet;
            e.since = Instant::now();
        });
    }

    fn review_started(&self) {
        self.connections.set(self.id, |e| {
            e.in_flight += 1;
            e.stage = Stage::Busy;
        });
    }

    /// A request ended, answered or dropped; `decided`: a review was
    /// answered 200, which makes its source known.
    fn request_ended(&self, decided: bool) {
        let now = Instant::now();
        let mut table = self.connections.lock();
        let Some(entry) = table.entries.get_mut(&self.id) else {
            return;
        };
        entry.in_flight = entry.in_flight.saturating_sub(1);
        if entry.in_flight == 0 {
            entry.stage = Stage::Idle;
            entry.since = now;
        }
        let source = entry.source;
        if decided && table.known.insert(source, now).is_none() {
            // Known from now: its connections already open are too, so no
            // stranger takes their place.
            for entry in table.entries.values_mut() {
                if entry.source == source {
                    entry.known = true;
                }
            }
        }
        if table.known.len() > KNOWN_SOURCES {
            let oldest = table
                .known
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(ip, _)| *ip);
            if let Some(oldest) = oldest {
                table.known.remove(&oldest);
            }
        }
    }

    /// Completes when the connection is to be shed to make room.
    pub async fn shed(&self) {
        self.shed.notified().await;
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut table = self.connections.lock();
        if let Some(entry) = table.entries.remove(&self.id)
            && let Some(count) = table.per_source.get_mut(&entry.source)
        {
            *count -= 1;
            if *count == 0 {
                table.per_source.remove(&entry.source);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    /// Whether the slot has been told to go.
    fn told_to_go(slot: &Slot) -> bool {
        let notified = slot.shed.notified();
        tokio::pin!(notified);
        // A stored permit (notify_one before anyone waited) completes at once.
        notified.as_mut().enable()
    }

    #[tokio::test(start_paused = true)]
    async fn at_the_cap_a_handshaking_connection_makes_room_before_a_quiet_one() {
        let connections = Connections::new(3, 3);
        let quiet = connections.admit(ip(1)).unwrap().0;
        quiet.handshaken();
        let handshaking = connections.admit(ip(2)).unwrap().0;
        let serving = connections.admit(ip(3)).unwrap().0;
        serving.handshaken();
        serving.review_started();
        let _new = connections.admit(ip(4)).unwrap().0;
        assert!(told_to_go(&handshaking));
        assert!(!told_to_go(&quiet) && !told_to_go(&serving));
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_connection_is_never_shed_and_then_the_new_one_is_refused() {
        let connections = Connections::new(2, 2);
        let a = connections.admit(ip(1)).unwrap().0;
        let b = connections.admit(ip(2)).unwrap().0;
        for slot in [&a, &b] {
            slot.handshaken();
            slot.review_started();
        }
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(connections.admit(ip(3)).unwrap_err(), Refused::Full);
        assert!(!told_to_go(&a) && !told_to_go(&b));
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_serving_connection_goes_only_after_a_second_of_silence_the_longest_idle_first()
    {
        let connections = Connections::new(2, 2);
        let older = connections.admit(ip(1)).unwrap().0;
        let newer = connections.admit(ip(2)).unwrap().0;
        for slot in [&older, &newer] {
            slot.handshaken();
            slot.review_started();
            slot.request_ended(true);
            tokio::time::advance(Duration::from_millis(300)).await;
        }
        // Between two reviews: both keep their place, even for the API
        // server's own new connection (a stranger never takes a known
        // source's place at all).
        assert_eq!(connections.admit(ip(1)).unwrap_err(), Refused::Full);
        assert_eq!(connections.admit(ip(3)).unwrap_err(), Refused::Full);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(connections.admit(ip(3)).unwrap_err(), Refused::Full);
        let _new = connections.admit(ip(1)).unwrap().0;
        assert!(told_to_go(&older));
        assert!(!told_to_go(&newer));
    }

    #[tokio::test(start_paused = true)]
    async fn one_source_past_its_share_sheds_its_own_connections_not_others() {
        let connections = Connections::new(10, 2);
        let other = connections.admit(ip(9)).unwrap().0;
        let first = connections.admit(ip(1)).unwrap().0;
        let _second = connections.admit(ip(1)).unwrap().0;
        let (_third, made_room) = connections.admit(ip(1)).unwrap();
        assert_eq!(made_room, Some(Refused::SourceFull));
        assert!(told_to_go(&first));
        assert!(!told_to_go(&other));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stranger_never_takes_a_known_sources_place_and_a_known_source_takes_a_strangers() {
        let connections = Connections::new(2, 2);
        // The API server's address has had a review answered.
        let api = connections.admit(ip(1)).unwrap().0;
        api.handshaken();
        api.review_started();
        api.request_ended(true);
        drop(api);
        let fresh = connections.admit(ip(1)).unwrap().0;
        fresh.handshaken();
        let stranger = connections.admit(ip(2)).unwrap().0;
        stranger.handshaken();
        tokio::time::advance(Duration::from_secs(5)).await;
        // Another stranger: it may shed the stranger, never the known
        // source's fresh connection, older though it is.
        let _next = connections.admit(ip(3)).unwrap().0;
        assert!(told_to_go(&stranger));
        assert!(!told_to_go(&fresh));
        // The known source comes in again: a stranger makes room.
        let _again = connections.admit(ip(1)).unwrap().0;
        assert!(!told_to_go(&fresh));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_dropped_half_way_leaves_its_connection_sheddable() {
        // An HTTP/2 stream reset drops the handler: its Busy guard goes
        // with it, and the connection may be shed again.
        let connections = Connections::new(1, 1);
        let slot = Arc::new(connections.admit(ip(1)).unwrap().0);
        slot.handshaken();
        let busy = Busy::new(slot.clone());
        tokio::time::advance(Duration::from_secs(5)).await;
        assert_eq!(connections.admit(ip(2)).unwrap_err(), Refused::Full);
        drop(busy);
        tokio::time::advance(Duration::from_secs(2)).await;
        let _next = connections.admit(ip(2)).unwrap().0;
        assert!(told_to_go(&slot));
        // A request not answered 200 made no source known.
        assert!(connections.lock().known.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_slot_given_back_frees_its_place_and_its_sources_share() {
        let connections = Connections::new(1, 1);
        let slot = connections.admit(ip(1)).unwrap().0;
        slot.handshaken();
        slot.review_started();
        assert_eq!(connections.admit(ip(1)).unwrap_err(), Refused::Full);
        drop(slot);
        assert!(connections.is_empty());
        let _again = connections.admit(ip(1)).unwrap().0;
    }

    #[tokio::test(start_paused = true)]
    async fn a_source_at_its_share_with_every_connection_serving_is_refused_for_its_share() {
        let connections = Connections::new(10, 2);
        let serving: Vec<Slot> = (0..2)
            .map(|_| connections.admit(ip(1)).unwrap().0)
            .collect();
        for slot in &serving {
            slot.handshaken();
            slot.review_started();
        }
        assert_eq!(connections.admit(ip(1)).unwrap_err(), Refused::SourceFull);
        // Another source still gets in: the table has room.
        let (_other, made_room) = connections.admit(ip(2)).unwrap();
        assert_eq!(made_room, None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stranger_holds_a_quarter_and_a_known_source_three_quarters() {
        let connections = Connections::new(1000, Connections::default_per_source(1000));
        // A stranger whose requests stay busy (a body that never comes).
        let mut held = Vec::new();
        for _ in 0..250 {
            let slot = connections.admit(ip(66)).unwrap().0;
            slot.handshaken();
            slot.review_started();
            held.push(slot);
        }
        assert_eq!(connections.admit(ip(66)).unwrap_err(), Refused::SourceFull);
        // The API server, known: its burst of 600 calls in flight gets in.
        let api = connections.admit(ip(1)).unwrap().0;
        api.handshaken();
        api.review_started();
        api.request_ended(true);
        let mut burst = vec![api];
        for _ in 1..600 {
            let slot = connections.admit(ip(1)).unwrap().0;
            slot.handshaken();
            slot.review_started();
            burst.push(slot);
        }
        assert_eq!(connections.len(), 850);
    }

    #[tokio::test(start_paused = true)]
    async fn connections_opened_before_their_source_became_known_are_known_too() {
        let connections = Connections::new(2, 2);
        let first = connections.admit(ip(1)).unwrap().0;
        first.handshaken();
        let second = connections.admit(ip(1)).unwrap().0;
        second.handshaken();
        first.review_started();
        first.request_ended(true);
        tokio::time::advance(Duration::from_secs(5)).await;
        // A stranger at the cap: it may take neither API server connection.
        assert_eq!(connections.admit(ip(2)).unwrap_err(), Refused::Full);
        assert!(!told_to_go(&first) && !told_to_go(&second));
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_shed_is_not_chosen_again_nor_counted_past_the_cap() {
        let connections = Connections::new(2, 2);
        let a = connections.admit(ip(1)).unwrap().0;
        let b = connections.admit(ip(2)).unwrap().0;
        let _c = connections.admit(ip(3)).unwrap().0;
        let _d = connections.admit(ip(4)).unwrap().0;
        // Both older ones went, one each, before either task wound down.
        assert!(told_to_go(&a) && told_to_go(&b));
        assert_eq!(connections.len(), 2);
    }

    #[test]
    fn the_default_share_holds_an_api_servers_calls_in_flight() {
        // 600 requests in flight by default, one connection each.
        assert!(Connections::default_per_source(1000) >= 600);
        assert!(Connections::default_per_source(1000) < 1000);
        assert_eq!(Connections::default_per_source(40), 50);
    }
}
