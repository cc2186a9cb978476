//! Raw bytes as the body of a review: whatever decodes is decided by both
//! webhooks and judged by the oracle; nothing may panic. Seeded with every
//! request of tests/fixtures (bench/fuzz.sh does it).

#![no_main]

mod common;

use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the settings; the rest is the body.
    let (index, body) = match data.split_first() {
        Some((first, rest)) => (*first as usize, rest),
        None => (0, data),
    };
    // Bodies the webhook refuses must not panic either.
    for hook in [
        common::oracle::Hook::Mutate,
        common::oracle::Hook::Validate,
        common::oracle::Hook::ValidateAll,
    ] {
        let _ = common::decide(index, hook, body);
    }
    let Ok(review) = serde_json::from_slice::<Value>(body) else {
        return;
    };
    if review.get("request").is_some_and(Value::is_object) {
        common::check(&review, index, false);
    }
});
