//! Unit tests of the controller: single decisions against hand-fed events, and whole runs
//! of the simulator in `sim.rs` against the best fixed delay.

use super::sim::*;
use super::*;

const DELAYS: [u64; 11] = [0, 10, 100, 200, 500, 750, 1000, 1250, 1500, 2000, 3000];

fn check(clients: usize, think: u64, latency: u64, iops: u64) {
    let secs = 6;
    let adaptive = simulate(clients, think, latency, iops, Policy::Adaptive, secs);
    let (best_delay, best) = DELAYS
        .iter()
        .map(|&d| {
            let t = simulate(
                clients,
                think,
                latency,
                iops,
                Policy::Fixed {
                    delay: d,
                    siblings: 5,
                },
                secs,
            );
            (d, t)
        })
        .fold((0, 0.0), |a, b| if b.1 > a.1 { b } else { a });
    eprintln!(
        "clients {clients:>2} think {think:>5} µs latency {latency:>4} µs iops {iops:>5}: adaptive {adaptive:>7.0} tps, best fixed {best:>7.0} tps at {best_delay} µs ({:.2})",
        adaptive / best
    );
    assert!(
        adaptive >= 0.9 * best,
        "adaptive {adaptive:.0} tps < 90% of the best fixed delay ({best_delay} µs: {best:.0} tps) \
         for {clients} clients, think {think} µs, latency {latency} µs, {iops} IOPS"
    );
}

/// Up to eight sessions commit at a rate that does not depend on patience at all but
/// varies from epoch to epoch by tens of percent (a CPU-bound load on two CPUs): 1,000
/// flushes/s of 1 to 8 commits, the mean changing every 50 ms. Returns the patience after `secs` simulated seconds and its mean over the
/// second half, µs.
fn patience_under_noise(capacity: Option<f64>, secs: u64) -> (u64, f64) {
    let mut c = Controller::with_flush_capacity(capacity);
    let mut rng = Rng(0x5EED);
    let mut level = 5u64;
    let (mut sum, mut n) = (0.0, 0u64);
    let mut lsn = 0u64;
    for i in 0..secs * 1000 {
        let now = 1000 + i * 1000;
        if i % 50 == 0 {
            level = 2 + rng.next() % 6; // 2..=7
        }
        let k = (level + rng.next() % 3).saturating_sub(1).max(1); // level-1 ..= level+1
        for s in 0..k {
            lsn += 1;
            c.on_arrival(now - 300 + s, s, lsn);
        }
        c.on_flush_done(now, 200, k);
        c.on_published(now, lsn);
        if i >= secs * 500 {
            sum += c.patience_us() as f64;
            n += 1;
        }
    }
    (c.patience_us(), sum / n as f64)
}

#[test]
fn noise_does_not_lengthen_patience_while_the_device_has_spare_capacity() {
    // 1,000 flushes/s on a device that does 10,000: a wait can save only flushes that cost
    // nothing, so patience must not drift up on noise (the busy rule's easy move up walked
    // it to the cap, 20 ms, on such noise unthrottled).
    let (end, mean) = patience_under_noise(Some(10_000.0), 60);
    let (end_busy, mean_busy) = patience_under_noise(None, 60);
    eprintln!(
        "patience under noise: spare capacity {end} µs (mean {mean:.0}), \
         capacity unknown (busy rule) {end_busy} µs (mean {mean_busy:.0})"
    );
    assert!(
        mean < 1000.0,
        "with spare capacity patience drifted up on noise: mean {mean:.0} µs over 30 s"
    );
}

#[test]
fn votes_for_the_disfavoured_direction_restart_when_the_regime_changes() {
    let mut c = Controller::with_flush_capacity(Some(1000.0));
    c.patience_us = 1000.0;
    // Busy: the shorter probe wins by 6%, one vote for down (two are needed).
    c.utilization = Some(0.9);
    c.hill_climb(100.0, 106.0);
    assert_eq!(c.patience_us, 1000.0);
    // Spare capacity: now the longer probe wins by 6%. That is one vote for up, not a
    // second vote for the same thing.
    c.utilization = Some(0.1);
    c.hill_climb(106.0, 100.0);
    assert_eq!(
        c.patience_us, 1000.0,
        "two votes for opposite directions moved patience"
    );
    // A second pair the same way moves it up.
    c.hill_climb(106.0, 100.0);
    assert!(c.patience_us > 1000.0);
}

/// A few sessions whose transactions take 100 to 1000 times a flush, on a fast disk with
/// nearly all of its capacity spare: a wait could rarely gather a second commit and would
/// save only flushes that cost nothing, so once settled (after 2 s) leaders do not wait
/// (with at most a few µs on average, from explorations) and throughput is that of never
/// waiting.
#[test]
fn does_not_wait_on_an_idle_fast_disk() {
    for (clients, think, latency) in [
        (2usize, 20_000u64, 50u64),
        (3, 20_000, 100),
        (4, 20_000, 200),
        (4, 50_000, 50),
        (4, 5_000, 50),
    ] {
        let sim = Sim {
            clients,
            think,
            latency,
            iops: 0,
            change: None,
            late_clients: None,
            window: (2_000_000, 30_000_000),
        };
        let st = simulate_stats(&sim, Policy::Adaptive);
        let never = simulate_stats(
            &sim,
            Policy::Fixed {
                delay: 0,
                siblings: 0,
            },
        );
        let mean_wait = st.wait_us as f64 / st.groups.max(1) as f64;
        eprintln!(
            "idle fast disk: {clients} clients, think {think} µs, flush {latency} µs: \
             {} commits (never waiting: {}), mean wait {mean_wait:.2} µs, {} of {} groups waited",
            st.commits, never.commits, st.waited_groups, st.groups
        );
        assert!(
            mean_wait <= 0.02 * latency as f64,
            "{clients} clients, think {think} µs, flush {latency} µs: leaders waited \
             {mean_wait:.2} µs on average"
        );
        assert!(st.commits as f64 >= 0.99 * never.commits as f64);
    }
}

/// With spare capacity, an exploration to a longer patience that wins once is tried again
/// right after the next pair, and patience jumps there only on the second win in a row;
/// a loss in between forgets the first win.
#[test]
fn a_longer_patience_needs_two_exploration_wins_in_a_row_with_spare_capacity() {
    let spare_pair = |c: &mut Controller| {
        c.end_epoch(1.0, 0.000_1); // Up: 100 flushes/s against 10,000
        c.end_epoch(1.0, 0.000_1); // Down
    };
    for second_wins in [true, false] {
        let mut c = Controller::with_flush_capacity(Some(10_000.0));
        c.on_arrival(0, 1, 1);
        c.on_arrival(0, 2, 2);
        c.patience_us = 50.0;
        c.busy = false;
        c.explore_ref = 1.0;
        c.probe = Probe::Explore(5000.0);
        c.end_epoch(1.2, 0.000_1); // wins by 20%
        assert_eq!(c.patience_us, 50.0, "one win is not enough");
        assert_eq!(c.probe, Probe::Up);
        spare_pair(&mut c);
        assert_eq!(
            c.probe,
            Probe::Explore(5000.0),
            "tried again after one pair"
        );
        c.end_epoch(if second_wins { 1.2 } else { 1.0 }, 0.000_1);
        if second_wins {
            assert_eq!(c.patience_us, 5000.0, "two wins in a row jump");
        } else {
            assert_eq!(c.patience_us, 50.0);
            assert_eq!(c.confirm_up, None, "the first win is forgotten");
        }
    }
    // While the device is busy, up is favoured: one win jumps.
    let mut c = Controller::with_flush_capacity(Some(10_000.0));
    c.on_arrival(0, 1, 1);
    c.on_arrival(0, 2, 2);
    c.patience_us = 50.0;
    c.busy = true;
    c.explore_ref = 1.0;
    c.probe = Probe::Explore(5000.0);
    c.end_epoch(1.2, 0.009);
    assert_eq!(c.patience_us, 5000.0);
}

#[test]
fn single_client_never_waits() {
    let mut c = Controller::new();
    c.on_arrival(0, 1, 0);
    c.on_flush_done(200, 200, 1);
    c.on_release(200, 1);
    c.on_arrival(1200, 1, 1200);
    assert_eq!(c.decide(1200, 1200), None, "nobody else can join");
}

/// Sessions 1 and 2 commit together every 3000 µs for four rounds (until 12000 µs): a
/// flush of 2000 µs, then a cycle of 1000 µs each.
fn two_sessions_in_step() -> Controller {
    let mut c = Controller::new();
    for round in 0..4u64 {
        let t = round * 3000;
        c.on_arrival(t, 1, t);
        c.on_arrival(t + 10, 2, t + 10);
        c.on_flush_done(t + 2000, 2000, 2);
        c.on_published(t + 2000, t + 10);
        c.on_release(t + 2000, 1);
        c.on_release(t + 2000, 2);
    }
    c
}

#[test]
fn waits_for_an_expected_session_and_not_for_an_idle_one() {
    let mut c = two_sessions_in_step();
    // Session 1 arrives; session 2 is expected about 1000 µs after its release.
    let now = 4 * 3000;
    c.on_arrival(now, 1, now);
    let w = c.decide(now, now).expect("session 2 is worth waiting for");
    assert!(w > now && w <= now + 2 * 3000);
    // Once session 2 has gone idle for longer than STALE_US it is forgotten.
    let later = now + STALE_US + 10;
    c.on_flush_done(later, 2000, 1);
    c.on_release(later, 1);
    c.on_arrival(later + 1, 1, later + 1);
    assert_eq!(c.decide(later + 1, later + 1), None);
}

#[test]
fn a_session_released_by_a_publish_is_expected_before_its_thread_says_so() {
    let mut c = two_sessions_in_step();
    // The next flush covers both. Session 1's thread gets the mutex back, runs its next
    // transaction and opens a group before session 2's thread has run at all.
    let t = 4 * 3000;
    c.on_arrival(t, 1, t);
    c.on_arrival(t + 10, 2, t + 10);
    c.on_flush_done(t + 2000, 2000, 2);
    c.on_published(t + 2000, t + 10);
    c.on_release(t + 2000, 1);
    c.on_arrival(t + 2900, 1, t + 2900);
    let w = c.decide(t + 2900, t + 2900);
    assert!(
        w.is_some(),
        "session 2 was released by the publish and is due about now: wait for it"
    );
    // Its thread's own release, later, does not move its release time.
    c.on_release(t + 2950, 2);
    assert_eq!(c.decide(t + 2900, t + 2900), w);
}

#[test]
fn matches_the_best_fixed_delay_on_simulated_devices() {
    // IOPS caps: unlimited, 5000 and 1000 write requests per second.
    for &iops in &[0u64, 5000, 1000] {
        for &clients in &[1usize, 10, 64] {
            check(clients, 1000, 200, iops);
        }
    }
}

/// The best fixed delay's throughput for a device that does not change.
fn best_fixed(clients: usize, think: u64, latency: u64, iops: u64) -> (u64, f64) {
    DELAYS
        .iter()
        .map(|&d| {
            let t = simulate(
                clients,
                think,
                latency,
                iops,
                Policy::Fixed {
                    delay: d,
                    siblings: 5,
                },
                4,
            );
            (d, t)
        })
        .fold((0, 0.0), |a, b| if b.1 > a.1 { b } else { a })
}

#[test]
fn settles_within_about_a_second_after_the_disk_changes() {
    // The disk changes at 3 s; throughput from 4 s to 6 s must be within 10% of the best
    // fixed delay for the new disk (measured on a disk that was always like it).
    for (before, after) in [(0u64, 1000u64), (1000, 0), (5000, 1000)] {
        for clients in [10usize, 64] {
            let sim = Sim {
                clients,
                think: 1000,
                latency: 200,
                iops: before,
                change: Some((3_000_000, after)),
                late_clients: None,
                window: (4_000_000, 6_000_000),
            };
            let adaptive = sim.run(Policy::Adaptive);
            let (d, best) = best_fixed(clients, 1000, 200, after);
            eprintln!(
                "clients {clients:>2} iops {before:>5} -> {after:>5}: adaptive {adaptive:>7.0} tps 1-3 s after the change, best fixed {best:>7.0} at {d} µs ({:.2})",
                adaptive / best
            );
            assert!(
                adaptive >= 0.9 * best,
                "{clients} clients, {before} -> {after} IOPS: adaptive {adaptive:.0} tps < 90% of {best:.0}"
            );
        }
    }
}

#[test]
fn settles_within_about_a_second_after_the_load_changes() {
    // From 1 client for 3 s to 10 clients (9 of them start at 3 s): 1-3 s later,
    // within 10% of the best fixed delay for 10 clients.
    for iops in [0u64, 1000] {
        let (_, best) = best_fixed(10, 1000, 200, iops);
        let adaptive = simulate_load_change(iops);
        eprintln!(
            "iops {iops:>5}, 1 -> 10 clients: adaptive {adaptive:>7.0} tps 1-3 s after, best fixed {best:>7.0} ({:.2})",
            adaptive / best
        );
        assert!(
            adaptive >= 0.9 * best,
            "{iops} IOPS: {adaptive:.0} < 90% of {best:.0}"
        );
    }
}

#[test]
fn matches_the_best_fixed_delay_with_slow_transactions() {
    for &clients in &[10usize, 64] {
        check(clients, 5000, 500, 1000);
    }
}
