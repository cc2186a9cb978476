//! The rule of `serve --release-restarted` against an oracle that knows
//! the true times: when each run of each opted-in container really
//! started, when each child was really made, and how far the node's clock
//! is off. The kubelet writes what it writes (its clock, truncated to the
//! second), the API server stamps each child with its own clock, truncated
//! too, and the status write that shows a run comes some time after it
//! started. Within the clock margin the rule must never release a child
//! the current run made (the oracle's truth: made at or after the newest
//! run's true start), and must release every child made well before it.
//!
//! Deterministic: a fixed seed, no failure file; `PROPTEST_CASES=n` runs
//! more.

use std::time::Duration;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, Pod, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use ownerguard::commands::restarts::{Plan, plan};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

const MARGIN_MS: i64 = 2_000;
const EPOCH: i64 = 1_780_000_000_000; // ms

/// A time the kubelet or the API server writes: the clock's reading,
/// truncated to the second (RFC 3339 on the wire).
fn written(ms: i64) -> Timestamp {
    Timestamp::from_second((EPOCH + ms).div_euclid(1000)).unwrap()
}

/// One opted-in container: its runs' true starts (ms, ascending), and
/// whether the newest of them has crashed, the container waiting in
/// back-off for the next (that run is then the last state, no run the
/// current state).
#[derive(Debug, Clone)]
struct Container {
    starts: Vec<i64>,
    backing_off: bool,
}

#[derive(Debug, Clone)]
struct World {
    containers: Vec<Container>,
    /// How far the node's clock is off the API server's (ms), within the
    /// margin.
    skew: i64,
    /// How long after the newest run started its status was written.
    report_lag: i64,
    /// Children: when each was truly made (ms).
    children: Vec<i64>,
    /// Children made near the newest run's start: their offset from it
    /// (ms).
    near: Vec<i64>,
}

fn world() -> impl Strategy<Value = World> {
    let container = (prop::collection::vec(1i64..120_000, 1..5), any::<bool>()).prop_map(
        |(gaps, backing_off)| {
            let mut at = 0;
            Container {
                starts: gaps
                    .into_iter()
                    .map(|gap| {
                        at += gap;
                        at
                    })
                    .collect(),
                backing_off,
            }
        },
    );
    (
        prop::collection::vec(container, 1..3),
        -MARGIN_MS..=MARGIN_MS,
        0i64..5_000,
        prop::collection::vec(0i64..400_000, 1..30),
        prop::collection::vec(-8_000i64..8_000, 1..30),
    )
        .prop_map(|(containers, skew, report_lag, children, near)| World {
            containers,
            skew,
            report_lag,
            children,
            near,
        })
}

/// The pod's status as the kubelet writes it.
fn pod(world: &World) -> Pod {
    let statuses = world
        .containers
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let newest = *c.starts.last().unwrap();
            let restarts = c.starts.len() - 1;
            if c.backing_off {
                // The newest run crashed: waiting, that run the last
                // state, the count still the one of that run.
                return ContainerStatus {
                    name: format!("c{i}"),
                    restart_count: i32::try_from(restarts).unwrap(),
                    container_id: Some(format!("containerd://c{i}-{restarts}")),
                    state: Some(ContainerState {
                        waiting: Some(ContainerStateWaiting {
                            reason: Some("CrashLoopBackOff".into()),
                            ..ContainerStateWaiting::default()
                        }),
                        ..ContainerState::default()
                    }),
                    last_state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            started_at: Some(Time(written(newest + world.skew))),
                            finished_at: Some(Time(written(newest + 500 + world.skew))),
                            container_id: Some(format!("containerd://c{i}-{restarts}")),
                            ..ContainerStateTerminated::default()
                        }),
                        ..ContainerState::default()
                    }),
                    ..ContainerStatus::default()
                };
            }
            ContainerStatus {
                name: format!("c{i}"),
                restart_count: i32::try_from(restarts).unwrap(),
                container_id: Some(format!("containerd://c{i}-{restarts}")),
                state: Some(ContainerState {
                    running: Some(ContainerStateRunning {
                        started_at: Some(Time(written(newest + world.skew))),
                    }),
                    ..ContainerState::default()
                }),
                last_state: (restarts > 0).then(|| ContainerState {
                    terminated: Some(ContainerStateTerminated {
                        started_at: Some(Time(written(c.starts[restarts - 1] + world.skew))),
                        finished_at: Some(Time(written(newest + world.skew))),
                        ..ContainerStateTerminated::default()
                    }),
                    ..ContainerState::default()
                }),
                ..ContainerStatus::default()
            }
        })
        .collect();
    Pod {
        status: Some(PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(statuses),
            ..PodStatus::default()
        }),
        ..Pod::default()
    }
}

#[test]
fn no_child_of_the_current_run_is_released_and_old_ones_are() {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2_000);
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    );
    runner
        .run(&world(), |world| {
            let names: Vec<String> = (0..world.containers.len())
                .map(|i| format!("c{i}"))
                .collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            // The oracle: the newest run of any opted-in container that
            // ran after an earlier one (the token names the pod, not the
            // container); a run that crashed and waits to start again is
            // still the newest one that ran.
            let restarted: Vec<i64> = world
                .containers
                .iter()
                .filter(|c| c.starts.len() > 1)
                .map(|c| *c.starts.last().unwrap())
                .collect();
            let newest = restarted.iter().copied().max();
            let reported = newest.map(|start| written(start + world.report_lag));
            let plan = plan(
                &pod(&world),
                &names,
                Duration::from_millis(MARGIN_MS as u64),
                reported,
            );
            let Some(newest) = newest else {
                prop_assert_eq!(plan, Plan::Nothing, "nothing restarted");
                return Ok(());
            };
            let made = match plan {
                Plan::Release { made, .. } => made,
                // The clock gate errs on the side of holding: a node just
                // within the margin, reported at once, may be held (safe:
                // nothing released), never one well within it.
                Plan::ClockAhead { .. } => {
                    prop_assert!(
                        world.skew - world.report_lag > MARGIN_MS - 2_000,
                        "held with the node {} ms off, reported after {} ms",
                        world.skew,
                        world.report_lag
                    );
                    return Ok(());
                }
                other => {
                    return Err(TestCaseError::fail(format!(
                        "a restart within the margin gave {other:?}"
                    )));
                }
            };
            let near = world.near.iter().map(|offset| newest + offset);
            for child in world.children.iter().copied().chain(near) {
                let takes = made.takes(Some(&written(child)));
                if child >= newest {
                    prop_assert!(
                        !takes,
                        "child made at {child} ms, after the newest run started at {newest} ms, released"
                    );
                }
                // Made well before: the margin on each side of the start
                // and the second a truncation may hide.
                if child + 2 * MARGIN_MS + 1_000 < newest {
                    prop_assert!(
                        takes,
                        "child made at {child} ms, long before the run of {newest} ms, kept"
                    );
                }
            }
            Ok(())
        })
        .unwrap();
}
