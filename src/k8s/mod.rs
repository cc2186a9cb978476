//! Kubernetes' own conventions, as ownerguard needs them: what the API
//! server accepts as a name ([`names`]), Go's duration syntax
//! ([`duration`]), and the API client of every command ([`client`]).

pub mod client;
pub mod duration;
pub mod names;
