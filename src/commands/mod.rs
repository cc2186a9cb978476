//! The commands of the binary besides `serve`: the flags of all of them
//! ([`cli`]), `review` ([`review`]), `certs` ([`certs`]), `release`
//! ([`release`]), `doctor` ([`doctor`]) and `audit` ([`audit`]).

pub mod audit;
pub mod certs;
pub mod cli;
pub mod doctor;
pub mod release;
pub mod review;
