//! The owner lookup of a test case (`tests/fixtures/<case>/`): its
//! `pods.yaml`, where the owners its `case.yaml` names in
//! `lookupFailures` cannot be looked up (the API down), to replay a 503.
//! Test support, shared by the tests and the fuzz targets (by `#[path]`).

use std::collections::HashSet;

use futures::future::BoxFuture;
use ownerguard::owner::{
    Inventory, Lookup, LookupBudget, LookupError, OwnerLookup, PodQuery, Source,
};

/// The inventory of a case, where the owners of `lookup_failures` cannot
/// be looked up.
pub struct CaseLookup {
    pub inventory: Inventory,
    pub failures: HashSet<String>,
}

impl OwnerLookup for CaseLookup {
    fn lookup<'a>(&'a self, query: PodQuery<'a>) -> BoxFuture<'a, Lookup> {
        if self.failures.contains(query.name) {
            let outcome = Err(LookupError::TimedOut {
                after: LookupBudget::DEFAULT_TIMEOUT,
            });
            return Box::pin(std::future::ready(Lookup {
                source: Source::Api,
                outcome,
            }));
        }
        self.inventory.lookup(query)
    }
}
