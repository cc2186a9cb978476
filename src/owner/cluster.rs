//! Owners looked up in the cluster: the watch cache first, then one live
//! GET.
//!
//! The cache answers alone only when it agrees with the object: the pod is
//! there with the declared uid. A miss or another uid is checked live,
//! because a worker that just started may create objects before its own
//! watch event arrives, and a pod replaced under the same name may not have
//! reached the cache either. The live answer wins.

use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PartialObjectMeta};
use tokio::time::Instant;

use super::lookup::{Lookup, ObservedPod, OwnerLookup, Source};
use crate::cache::Watches;
use crate::error::LookupError;

pub struct ClusterLookup {
    client: kube::Client,
    watches: Arc<Watches>,
}

impl ClusterLookup {
    pub fn new(client: kube::Client, watches: Arc<Watches>) -> Self {
        Self { client, watches }
    }

    /// One live GET of the pod's metadata, bounded by `deadline`.
    async fn get(&self, namespace: &str, name: &str, deadline: Instant) -> Lookup {
        let api: Api<PartialObjectMeta<Pod>> = Api::namespaced(self.client.clone(), namespace);
        let budget = deadline.saturating_duration_since(Instant::now());
        let outcome = match tokio::time::timeout_at(deadline, api.get_metadata_opt(name)).await {
            Ok(Ok(pod)) => Ok(pod.map(|pod| ObservedPod {
                uid: pod.metadata.uid.unwrap_or_default(),
                terminating: pod.metadata.deletion_timestamp.is_some(),
            })),
            Ok(Err(source)) => Err(LookupError::Api { source }),
            Err(_) => Err(LookupError::TimedOut { after: budget }),
        };
        Lookup {
            source: Source::Api,
            outcome,
        }
    }
}

impl OwnerLookup for ClusterLookup {
    fn lookup<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        expected_uid: &'a str,
        deadline: Instant,
    ) -> BoxFuture<'a, Lookup> {
        Box::pin(async move {
            if self.watches.covers(namespace)
                && let Some(pod) = self
                    .watches
                    .index
                    .get_matching(namespace, name, expected_uid)
            {
                return Lookup {
                    source: Source::Cache,
                    outcome: Ok(Some(pod)),
                };
            }
            self.get(namespace, name, deadline).await
        })
    }

    fn is_ready(&self) -> bool {
        self.watches.is_synced()
    }
}
