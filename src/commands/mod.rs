//! The commands of the binary besides `serve`: the flags of all of them
//! ([`cli`]), `review` ([`review`]), `certs` ([`certs`]), `release`
//! ([`release`]), `doctor` ([`doctor`]) and `audit` ([`audit`]); and the
//! reaper ([`reaper`]) that `serve --reap-finished` runs.

pub mod audit;
pub mod certs;
pub mod cli;
pub mod doctor;
pub mod reaper;
pub mod release;
pub mod restarts;
pub mod review;
