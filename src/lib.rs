//! ownerguard: a Kubernetes admission webhook that ties the objects a
//! worker pod creates (agent pods, Jobs, prompt ConfigMaps) to that pod with
//! a correct, non-blocking `ownerReference`, so that the garbage collector
//! deletes them once the worker is gone, and refuses those whose owner is
//! wrong with a message that says how to fix it.
//!
//! A review travels one way through the rooms, each a folder:
//!
//! ```text
//!  serve/        HTTPS: mod (accept loop, probes, /metrics, drain), tls (certificates,
//!                reload, client CA), handlers (body, ?timeout=, router(), TransportError)
//!    │
//!  webhook.rs    one review, start to end: decode, plan, look up, decide, answer,
//!    │           then tell the observers
//!    ├─ admission/  the wire format: mod (review, request), object (metadata, references),
//!    │              template (where templates are), response, lenient (decoding), error
//!    ├─ decide/     the decision, pure: mod (plan, decide), policy (webhook kinds, Policy,
//!    │              Endpoint), resolve (who is declared: labels, references, requester checks),
//!    │              requester (the pod identity), create, update, ownership (the old object's
//!    │              owner of record), templates (rule 12), judge (reading the lookups),
//!    │              patch (the JSON Patch), denial (every refusal), subject (names in messages)
//!    ├─ owner/      is the owner there: lookup (the interface, LookupBudget), inventory/
//!    │              (--pods: json, yaml, builder), cluster/ (the live GET, throttle, and
//!    │              the watch cache: watches, watch, index, finished, health)
//!    └─ observe/    told of each finished decision: metrics, log (the decision log),
//!                   record (--record) in the fixture format; telemetry (the logs' setup)
//!
//!  commands/     the other commands: cli (every flag), review, certs, release, reaper,
//!                audit/ (classify, report, reports), doctor/ (gather, webhooks, modes,
//!                certificate, workload, probe, conditions)
//!  k8s/          Kubernetes' conventions: names, duration (Go syntax), client (no retries)
//!  deadline.rs   a future bounded by a deadline, a timer made only if it waits
//! ```
//!
//! The rooms depend one way (no cycle between modules): `k8s` <- `admission`
//! <- `owner` <- `decide` <- `observe` <- `webhook` <- `serve` <- `commands`;
//! a lower room that reports upward names a trait the higher one implements
//! ([`owner::ClusterMetrics`]).
//! The decision ([`decide`]) is pure and synchronous; only the lookup
//! waits. Each room re-exports what a user of the crate needs; its inner
//! files are its own.

pub mod admission;
pub mod commands;
pub mod deadline;
pub mod decide;
pub mod k8s;
pub mod observe;
pub mod owner;
pub mod serve;
pub mod webhook;
