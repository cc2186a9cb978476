//! The owner pod: whether the pod an object declares is really there
//! ([`lookup`]), from a static inventory ([`inventory`]) or the cluster
//! ([`cluster`]: the watch cache, then a live GET).

pub mod cluster;
pub mod inventory;
pub mod lookup;

pub use lookup::{
    Finished, Lookup, LookupBudget, LookupError, ObservedPod, OwnerLookup, PodQuery, Source,
};
