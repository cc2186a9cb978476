//! The owner pod: who an object declares ([`resolve`]) and whether that pod
//! is really there ([`lookup`]), from a static inventory ([`inventory`]) or
//! the cluster.

pub mod cluster;
pub mod inventory;
pub mod lookup;
pub mod resolve;
pub mod throttle;

pub use lookup::{Finished, Lookup, ObservedPod, OwnerLookup, PodQuery, Source};
pub use resolve::{Claim, Delegate, Origin, OwnerLabels, Requester, RequesterCheck};
