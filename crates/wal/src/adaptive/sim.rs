//! The controller against a simulated device: fixed flush latency and an IOPS cap (a token
//! bucket; a durable flush costs 2 write requests, the write and the cache flush, as on a
//! volatile-cache disk without FUA). Clients loop: think (the transaction's work, with
//! jitter), request a commit, wait for the flush. The group-commit protocol is the WAL's:
//! one flush at a time; the first waiter after a flush becomes the next leader.

use super::Controller;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

pub(super) struct Rng(pub(super) u64);
impl Rng {
    pub(super) fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn jitter(&mut self, base: u64, pct: u64) -> u64 {
        let span = base * pct / 100;
        base - span + self.next() % (2 * span + 1)
    }
}

#[derive(Clone, Copy)]
pub(super) enum Policy {
    Adaptive,
    /// PostgreSQL: sleep `delay` µs if at least `siblings` other transactions are active.
    Fixed {
        delay: u64,
        siblings: usize,
    },
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
enum Ev {
    /// A client finished thinking and requests a commit.
    Arrive(usize),
    /// The leader's wait timer fires (tagged with the group's id).
    Timer(u64),
    /// A flush in flight completes (tagged with its group's id).
    FlushDone(u64),
}

struct Device {
    latency: u64,
    /// Write requests per second; 0 = unlimited.
    iops: u64,
    /// Token bucket as virtual time: the next request may start at this time, µs.
    next_token: f64,
}

/// Requests a throttle may let through at once after an idle spell.
const BUCKET_DEPTH: f64 = 2.0;

impl Device {
    /// Start time of one write request submitted at `t` (token bucket).
    fn request(&mut self, t: f64) -> f64 {
        if self.iops == 0 {
            return t;
        }
        let gap = 1e6 / self.iops as f64;
        self.next_token = self.next_token.max(t - BUCKET_DEPTH * gap);
        let start = t.max(self.next_token);
        self.next_token += gap;
        start
    }

    /// When a flush issued at `now` completes: the write, then the cache flush, each half
    /// the device latency.
    fn flush(&mut self, now: u64) -> u64 {
        let half = self.latency as f64 / 2.0;
        let w = self.request(now as f64);
        let f = self.request(w + half);
        (f + half).ceil() as u64
    }
}

/// Runs `secs` simulated seconds and returns commits/s after the first second.
pub(super) fn simulate(
    clients: usize,
    think: u64,
    latency: u64,
    iops: u64,
    policy: Policy,
    secs: u64,
) -> f64 {
    Sim {
        clients,
        think,
        latency,
        iops,
        change: None,
        late_clients: None,
        window: (1_000_000, secs * 1_000_000),
    }
    .run(policy)
}

/// One simulated run. The device's IOPS cap may change at a point in time (`change`:
/// (µs, new cap)); only the first clients may run at first (`late_clients`: (µs, clients
/// before then)); commits are counted in `window` (µs, half open).
pub(super) struct Sim {
    pub(super) clients: usize,
    pub(super) think: u64,
    pub(super) latency: u64,
    pub(super) iops: u64,
    pub(super) change: Option<(u64, u64)>,
    pub(super) late_clients: Option<(u64, usize)>,
    pub(super) window: (u64, u64),
}

impl Sim {
    /// Commits/s in the window.
    pub(super) fn run(&self, policy: Policy) -> f64 {
        let commits = simulate_inner(self, policy);
        commits as f64 * 1e6 / (self.window.1 - self.window.0) as f64
    }
}

pub(super) fn simulate_load_change(iops: u64) -> f64 {
    Sim {
        clients: 10,
        think: 1000,
        latency: 200,
        iops,
        change: None,
        late_clients: Some((3_000_000, 1)),
        window: (4_000_000, 6_000_000),
    }
    .run(Policy::Adaptive)
}

/// Runs `sim` and returns the commits counted in its window.
fn simulate_inner(sim: &Sim, policy: Policy) -> u64 {
    simulate_stats(sim, policy).commits
}

/// What a simulation counted in its window.
#[derive(Debug, Default)]
pub(super) struct SimStats {
    /// Commits acknowledged.
    pub(super) commits: u64,
    /// Groups closed (flushes issued).
    pub(super) groups: u64,
    /// Groups kept open at all before their flush.
    pub(super) waited_groups: u64,
    /// Time groups were kept open, in all, µs.
    pub(super) wait_us: u64,
}

/// Runs `sim` and returns what it counted in its window.
pub(super) fn simulate_stats(sim: &Sim, policy: Policy) -> SimStats {
    let &Sim {
        clients,
        think,
        latency,
        iops,
        change,
        late_clients,
        window,
    } = sim;
    let end = window.1;
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (clients as u64) ^ (iops << 20));
    // What the server's start-up probe would measure: the device at start, back to back.
    let capacity = if iops == 0 {
        1e6 / latency as f64
    } else {
        (1e6 / latency as f64).min(iops as f64 / 2.0)
    };
    let mut ctl = Controller::with_flush_capacity(Some(capacity));
    let mut dev = Device {
        latency,
        iops,
        next_token: 0.0,
    };
    let mut q: BinaryHeap<Reverse<(u64, Ev)>> = BinaryHeap::new();
    for c in 0..clients {
        let start = match late_clients {
            Some((at, before)) if c >= before => at,
            _ => 0,
        };
        q.push(Reverse((start + rng.jitter(think, 50), Ev::Arrive(c))));
    }
    let mut waiting: Vec<usize> = Vec::new(); // queued for a free flight slot
    let mut group: Vec<usize> = Vec::new(); // members of the open group
    let mut open: Option<(u64, u64)> = None; // (group id, opened at)
                                             // Flights in issue order: (group id, members, issued at, done).
    let mut in_flight: std::collections::VecDeque<(u64, Vec<usize>, u64, bool)> =
        std::collections::VecDeque::new();
    // As in group_commit.rs: two flights when the adaptive patience in force is zero.
    let limit = |ctl: &Controller| match policy {
        Policy::Adaptive if ctl.effective_patience_us() == 0 => 2,
        _ => 1,
    };
    let mut group_id = 0u64;
    let mut stats = SimStats::default();

    while let Some(Reverse((now, ev))) = q.pop() {
        if now > end {
            break;
        }
        if let Some((at, cap)) = change {
            if now >= at && dev.iops != cap {
                dev.iops = cap;
                dev.next_token = now as f64;
            }
        }
        // What happened to the open group: opened now, an arrival joined, or its timer.
        let mut opened_now = false;
        let mut timer_fired = false;
        match ev {
            Ev::Arrive(c) => {
                ctl.on_arrival(now, c as u64, now);
                if open.is_some() {
                    group.push(c);
                } else if in_flight.len() >= limit(&ctl) {
                    waiting.push(c);
                } else {
                    group_id += 1;
                    open = Some((group_id, now));
                    opened_now = true;
                    group.push(c);
                }
            }
            Ev::Timer(id) => {
                if open.map(|(g, _)| g) != Some(id) {
                    continue;
                }
                timer_fired = true;
            }
            Ev::FlushDone(id) => {
                if let Some(f) = in_flight.iter_mut().find(|f| f.0 == id) {
                    f.3 = true;
                }
                // Publish in issue order.
                while in_flight.front().is_some_and(|f| f.3) {
                    let (_, members, issued, _) = in_flight.pop_front().expect("front");
                    ctl.on_flush_done(now, now - issued, members.len() as u64);
                    for &c in &members {
                        ctl.on_release(now, c as u64);
                        if now >= window.0 && now < window.1 {
                            stats.commits += 1;
                        }
                        q.push(Reverse((now + rng.jitter(think, 50), Ev::Arrive(c))));
                    }
                }
                if !waiting.is_empty() && open.is_none() && in_flight.len() < limit(&ctl) {
                    group_id += 1;
                    open = Some((group_id, now));
                    opened_now = true;
                    group.append(&mut waiting);
                }
            }
        }
        let Some((id, opened)) = open else { continue };
        let close_now = match policy {
            Policy::Adaptive => match ctl.decide(now, opened) {
                None => true,
                Some(t) => {
                    q.push(Reverse((t.max(now + 1), Ev::Timer(id))));
                    false
                }
            },
            Policy::Fixed { delay, siblings } => {
                if opened_now {
                    // Every client is inside a transaction while it thinks.
                    if delay > 0 && clients > siblings {
                        q.push(Reverse((now + delay, Ev::Timer(id))));
                        false
                    } else {
                        true
                    }
                } else {
                    timer_fired
                }
            }
        };
        if close_now {
            open = None;
            ctl.on_group_closed(now - opened);
            if now >= window.0 && now < window.1 {
                stats.groups += 1;
                stats.waited_groups += u64::from(now > opened);
                stats.wait_us += now - opened;
            }
            let done = dev.flush(now);
            in_flight.push_back((id, std::mem::take(&mut group), now, false));
            q.push(Reverse((done, Ev::FlushDone(id))));
        }
    }
    stats
}
