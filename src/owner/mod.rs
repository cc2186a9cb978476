//! The owner pod: whether the pod an object declares is really there
//! ([`OwnerLookup`]), from a static inventory ([`Inventory`]) or the cluster
//! ([`ClusterLookup`]: the watch cache, then a live GET).

pub(crate) mod cluster;
mod inventory;
mod lookup;

pub use cluster::{
    ClusterLookup, ClusterMetrics, DEFAULT_MAX_AGE, DEFAULT_SILENCE_LIMIT, FinishedChange,
    FinishedPod, FinishedPods, LookupLimits, WatchSettings, Watches,
};
pub use inventory::{Inventory, InventoryError, InventoryPod};
pub use lookup::{
    Finished, Lookup, LookupBudget, LookupError, ObservedPod, OwnerLookup, PodQuery, Source,
};
