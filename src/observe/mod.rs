//! What is told about the decisions: metrics ([`metrics`]), the logs
//! ([`telemetry`]), and `--record` ([`record`]) in the test-case format
//! ([`fixture`]).

pub mod fixture;
pub mod metrics;
pub mod record;
pub mod telemetry;
