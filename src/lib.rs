//! ownerguard: a Kubernetes admission webhook that ties the objects a
//! worker pod creates (agent pods, Jobs, prompt ConfigMaps) to that pod with
//! a correct, non-blocking `ownerReference`, so that the garbage collector
//! deletes them once the worker is gone, and refuses those whose owner is
//! wrong with a message that says how to fix it.
//!
//! A review travels one way through the modules:
//!
//! ```text
//!  HTTPS (server) ─► review: body, ?timeout= ─► webhook: one review, start to end
//!                                                  │
//!            admission: decode the AdmissionReview (metadata only)
//!                                                  │
//!            admit::plan ─ owner::resolve: labels, Pod ownerReferences, requester
//!                          patch: the JSON Patch, settled before any I/O
//!                                                  │
//!            owner::lookup: inventory (--pods), or the cluster (cache, then a GET)
//!                                                  │
//!            admit::decide ─► admission: AdmissionResponse, base64 patch
//!                                                  │
//!            log line, metrics, record (--record DIR: a ready test case)
//! ```
//!
//! The decision ([`admit`]) is pure and synchronous; only the lookup waits.

pub mod admission;
pub mod commands;
pub mod decide;
pub mod k8s;
pub mod observe;
pub mod owner;
pub mod serve;
pub mod webhook;
